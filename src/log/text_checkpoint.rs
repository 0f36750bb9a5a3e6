//! Kafka's text checkpoint files (docs/format.md "Leader-epoch checkpoint"): a version line,
//! an entry count, then one entry per line, fields separated by whitespace. The same layout
//! serves `leader-epoch-checkpoint` in a partition directory and the log dir's offset
//! checkpoints.
//!
//! ```text
//! 0          <- version
//! 2          <- entry count
//! 3 0        <- entries
//! 5 1200
//! ```
//!
//! Read as Kafka's `CheckpointFile` reads it (an empty file, or one with only a version, holds
//! no entries; the count must match the entries), but stricter where Kafka would go on with
//! what it could parse: every refusal names the line.

use super::metadata_file::Invalid;

/// Parses `text` as a version-`version` checkpoint whose entries `entry` parses from their
/// whitespace-separated fields.
pub fn parse<T>(
    text: &str,
    version: i32,
    mut entry: impl FnMut(&[&str]) -> Result<T, String>,
) -> Result<Vec<T>, Invalid> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let Some((n, v)) = lines.next() else {
        return Ok(Vec::new());
    };
    match v.trim().parse::<i32>() {
        Ok(found) if found == version => {}
        Ok(found) => {
            return Err(Invalid::at(
                n,
                format!("unsupported version {found} (expected {version})"),
            ))
        }
        Err(_) => return Err(Invalid::at(n, format!("malformed version line {v:?}"))),
    }
    let Some((n, c)) = lines.next() else {
        return Ok(Vec::new());
    };
    let count = c
        .trim()
        .parse::<usize>()
        .map_err(|_| Invalid::at(n, format!("malformed entry count {c:?}")))?;
    let mut out = Vec::with_capacity(count.min(1 << 16));
    for (n, line) in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = entry(&fields).map_err(|reason| Invalid::at(n, reason))?;
        out.push(parsed);
        if out.len() > count {
            return Err(Invalid::at(
                n,
                format!("more entries than the declared {count}"),
            ));
        }
    }
    if out.len() != count {
        return Err(Invalid::on(
            None,
            format!("{count} entries declared, {} found", out.len()),
        ));
    }
    Ok(out)
}

/// Encodes entries, each already formatted as its line.
pub fn encode(version: i32, lines: impl ExactSizeIterator<Item = String>) -> String {
    let mut out = format!("{version}\n{}\n", lines.len());
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Parses one integer field, naming it in the error.
pub fn field<T: std::str::FromStr>(fields: &[&str], i: usize, name: &str) -> Result<T, String> {
    let f = fields
        .get(i)
        .ok_or_else(|| format!("missing {name} (the line has {} fields)", fields.len()))?;
    f.parse::<T>()
        .map_err(|_| format!("{name} is not a valid integer: {f:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(f: &[&str]) -> Result<(i32, i64), String> {
        if f.len() != 2 {
            return Err(format!("expected 2 fields, found {}", f.len()));
        }
        Ok((field(f, 0, "epoch")?, field(f, 1, "offset")?))
    }

    #[test]
    fn reads_what_kafka_writes() {
        assert_eq!(
            parse("0\n2\n3 0\n5 1200\n", 0, pair),
            Ok(vec![(3, 0), (5, 1200)])
        );
        assert_eq!(
            encode(0, vec!["3 0".to_string()].into_iter()),
            "0\n1\n3 0\n"
        );
        // Kafka's reader: empty files and a version alone hold nothing; any whitespace splits.
        assert_eq!(parse("", 0, pair), Ok(vec![]));
        assert_eq!(parse("0\n", 0, pair), Ok(vec![]));
        assert_eq!(parse("0\n1\n3\t 7\n", 0, pair), Ok(vec![(3, 7)]));
    }

    #[test]
    fn every_malformed_form_names_its_line() {
        for (text, line) in [
            ("1\n0\n", Some(1)),
            ("x\n0\n", Some(1)),
            ("0\nx\n", Some(2)),
            ("0\n-1\n", Some(2)),
            ("0\n2\n3 0\n", None),
            ("0\n1\n3 0\n4 5\n", Some(4)),
            ("0\n1\n3\n", Some(3)),
            ("0\n1\n3 0 9\n", Some(3)),
            ("0\n1\nthree 0\n", Some(3)),
            ("0\n1\n3 99999999999999999999\n", Some(3)),
        ] {
            match parse(text, 0, pair) {
                Ok(v) => panic!("accepted {text:?} as {v:?}"),
                Err(e) => assert_eq!(e.line, line, "{text:?}: {}", e.reason),
            }
        }
    }
}
