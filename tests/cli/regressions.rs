//! Every input the fuzzers kept (`fuzz/corpus/<target>/`) replayed through the same oracles the
//! fuzz targets run (`fuzz/src/`, compiled in here), so CI checks them without a fuzzer; and the
//! inputs that once found a bug, each as a named test.

use std::path::{Path, PathBuf};

#[path = "../../fuzz/src/lib.rs"]
pub mod fuzzing;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

/// Runs every file of a target's corpus through its oracle; returns how many there were.
fn replay(target: &str) -> usize {
    let (_, run) = fuzzing::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for file in &files {
        let data = std::fs::read(file).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} fails its oracle",
            file.display()
        );
    }
    files.len()
}

#[test]
fn every_fuzz_target_has_a_committed_corpus() {
    for (target, _) in fuzzing::TARGETS {
        let n = std::fs::read_dir(corpus_dir(target)).map_or(0, |d| d.count());
        assert!(n > 0, "fuzz/corpus/{target} is empty");
    }
}

#[test]
fn the_frame_decoder_corpus_replays_clean() {
    replay("frame_decoder");
}

#[test]
fn the_jsonrpc_dispatch_corpus_replays_clean() {
    replay("jsonrpc_dispatch");
}

#[test]
fn the_skill_parser_corpus_replays_clean() {
    replay("skill_parser");
}

#[test]
fn the_memory_path_corpus_replays_clean() {
    replay("memory_path");
}

#[test]
fn the_file_path_corpus_replays_clean() {
    replay("file_path");
}

#[test]
fn the_domain_corpus_replays_clean() {
    replay("domain");
}
