//! What every `oncelog` command says, whatever it does: short help lines with the long text
//! under each command's own help, one meaning per exit code, counts in words.

use crate::common_cli;

use common_cli::{fresh_log, run, run_path, stdout};

const COMMANDS: [&str; 11] = [
    "dump",
    "bench",
    "append",
    "read",
    "verify",
    "recover",
    "truncate",
    "delete-records",
    "retention",
    "demo",
    "tier",
];

#[test]
fn top_level_help_lists_each_command_on_one_short_line() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for cmd in COMMANDS {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("{cmd} missing from\n{help}"));
        assert!(line.len() <= 100, "too long for a summary: {line}");
    }
}

#[test]
fn each_command_help_carries_its_long_text() {
    for (cmd, long) in [
        (
            "dump",
            "Exits 1 if anything was damaged, 2 if PATH cannot be read",
        ),
        ("bench", "checking every batch's CRC-32C. MB are 10^6 bytes"),
        ("verify", "without opening the log"),
        ("recover", "1 (changing nothing) when the mode refuses"),
        ("recover", "3 when data was removed"),
        ("recover", "--dry-run"),
        ("recover", "--backup <BACKUP>"),
    ] {
        let o = run(&[cmd, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{cmd}");
        let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains(long), "{cmd} --help:\n{help}");
    }
}

#[test]
fn bad_arguments_exit_2_for_every_command() {
    for cmd in COMMANDS {
        let o = run(&[cmd, "--no-such-option"]);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
    }
}

#[test]
fn verify_and_recover_count_in_words() {
    let tmp = tempfile::tempdir().unwrap();
    fresh_log(tmp.path());
    let v = stdout(&run_path(&["verify"], tmp.path()));
    assert!(v.contains(": 1 segment, 3 batches, "), "{v}");
    assert!(v.contains(" 1 snapshot, "), "{v}");
    let r = stdout(&run_path(&["recover"], tmp.path()));
    assert!(r.contains("validated 0 segments"), "{r}");
    assert!(r.contains("1 producer"), "{r}");
    assert!(r.contains(", 1 segment; closed cleanly"), "{r}");
    assert!(!r.contains("(s)"), "{r}");
}
