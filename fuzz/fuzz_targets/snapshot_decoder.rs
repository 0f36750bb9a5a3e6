#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    oncelog::producer::fuzz::fuzz_snapshot(data);
});
