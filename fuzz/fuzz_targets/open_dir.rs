#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    oncelog::log::fuzz::fuzz_open_dir(data);
});
