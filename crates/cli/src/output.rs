//! Line output to stdout: text or one JSON object per line, buffered.

use std::io::{self, BufWriter, StdoutLock, Write};

use serde::Serialize;

pub struct Out {
    w: BufWriter<StdoutLock<'static>>,
}

impl Out {
    pub fn stdout() -> Out {
        Out {
            w: BufWriter::new(io::stdout().lock()),
        }
    }

    pub fn line(&mut self, text: &str) -> io::Result<()> {
        let r = self
            .w
            .write_all(text.as_bytes())
            .and_then(|()| self.w.write_all(b"\n"));
        quiet_on_closed_pipe(r)
    }

    pub fn json(&mut self, value: &impl Serialize) -> io::Result<()> {
        let r = serde_json::to_writer(&mut self.w, value)
            .map_err(io::Error::from)
            .and_then(|()| self.w.write_all(b"\n"));
        quiet_on_closed_pipe(r)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        quiet_on_closed_pipe(self.w.flush())
    }
}

/// `oncelog dump dir | head`: the reader has all it wanted, which is not an error to report.
fn quiet_on_closed_pipe(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}
