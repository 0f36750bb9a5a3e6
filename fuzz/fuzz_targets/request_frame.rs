#![no_main]

use libfuzzer_sys::fuzz_target;

// One request frame (without its size prefix), as the broker's connections read it: header,
// then the body of any API and version, decoded as the handlers decode it. Run it with an
// allocation limit (`cargo fuzz run request_frame -- -malloc_limit_mb=64`): a decode must
// neither crash nor take memory out of proportion to the frame.
fuzz_target!(|data: &[u8]| {
    oncelog_broker::api::fuzz_request_frame(data);
});
