//! Man pages (`man/`) and shell completions (`completions/`) are generated from the clap tree and
//! must match the committed files. `CYBEROS_BLESS=1 cargo test --test cli man` rewrites them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;
use clap_complete::Shell;
use cyberos::cli::{Cli, SANDBOX_CHILD_COMMAND};

use crate::schema::blessing;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every man page, by file name: one per command and subcommand, hidden ones excluded.
fn man_pages() -> BTreeMap<String, Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    clap_mangen::generate_to(Cli::command(), dir.path()).unwrap();
    read_dir(dir.path())
}

/// The command tree without its hidden subcommands. clap_complete's zsh generator lists hidden
/// subcommands, so the root is rebuilt from the visible ones (only the root has hidden ones; a
/// test below keeps it that way).
fn visible_command() -> clap::Command {
    let full = Cli::command();
    assert_eq!(full.get_name(), "cyberos");
    let mut cmd = clap::Command::new("cyberos")
        .disable_help_subcommand(true)
        .subcommand_required(true)
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    assert_eq!(full.get_version(), Some(env!("CARGO_PKG_VERSION")));
    cmd = cmd.version(env!("CARGO_PKG_VERSION"));
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    cmd
}

fn completions() -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for (shell, file) in [
        (Shell::Bash, "cyberos.bash"),
        (Shell::Zsh, "_cyberos"),
        (Shell::Fish, "cyberos.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut visible_command(), "cyberos", &mut buf);
        out.insert(file.to_owned(), buf);
    }
    out
}

fn read_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn check(dir: &Path, generated: &BTreeMap<String, Vec<u8>>) {
    if blessing() {
        if dir.exists() {
            std::fs::remove_dir_all(dir).unwrap();
        }
        std::fs::create_dir_all(dir).unwrap();
        for (name, bytes) in generated {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        return;
    }
    let committed = read_dir(dir);
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(generated),
        "{} is stale: run `CYBEROS_BLESS=1 cargo test --test cli man`",
        dir.display()
    );
    for (name, bytes) in generated {
        assert!(
            committed[name] == *bytes,
            "{}/{name} is stale: run `CYBEROS_BLESS=1 cargo test --test cli man`",
            dir.display()
        );
    }
}

#[test]
fn man_pages_are_current() {
    let pages = man_pages();
    for expected in [
        "cyberos.1",
        "cyberos-skill.1",
        "cyberos-skill-validate.1",
        "cyberos-skill-broker-tail.1",
        "cyberos-tool-call.1",
        "cyberos-sandbox-check.1",
    ] {
        assert!(
            pages.contains_key(expected),
            "{expected} missing: {:?}",
            pages.keys()
        );
    }
    for (name, bytes) in &pages {
        assert!(
            !name.contains(SANDBOX_CHILD_COMMAND),
            "hidden command {name} has a page"
        );
        assert!(
            !String::from_utf8_lossy(bytes).contains(SANDBOX_CHILD_COMMAND),
            "{name} mentions the hidden command"
        );
    }
    check(&root().join("man"), &pages);
}

#[test]
fn completions_are_current() {
    let generated = completions();
    for (name, bytes) in &generated {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            text.contains("validate") && text.contains("keygen"),
            "{name} lacks subcommands"
        );
        assert!(
            !text.contains(SANDBOX_CHILD_COMMAND),
            "{name} completes the hidden command"
        );
    }
    check(&root().join("completions"), &generated);
}

#[test]
fn one_page_per_visible_command() {
    fn count(cmd: &clap::Command) -> usize {
        1 + cmd
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(count)
            .sum::<usize>()
    }
    assert_eq!(man_pages().len(), count(&Cli::command()));
}

#[test]
fn only_top_level_commands_are_hidden() {
    fn hidden_below(cmd: &clap::Command) -> Vec<String> {
        cmd.get_subcommands()
            .flat_map(|c| {
                let mut v = hidden_below(c);
                if c.is_hide_set() {
                    v.push(c.get_name().to_owned());
                }
                v
            })
            .collect()
    }
    let root = Cli::command();
    for sub in root.get_subcommands() {
        assert!(
            hidden_below(sub).is_empty(),
            "hidden commands under {}: completions would list them",
            sub.get_name()
        );
    }
}
