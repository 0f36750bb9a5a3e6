//! The wire: framing, request headers and bodies, response frames.

mod frame;
mod request;
mod response;

pub use frame::{Frame, FrameError, FrameLimits, FrameMemory, FrameReader, RequestMemory};
pub use request::{Request, RequestError};
pub use response::{encode, write_frame, EncodeError, ResponseFrame};
