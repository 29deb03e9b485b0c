//! Property tests (proptest) for path canonicalisation and glob enforcement. They drive the same
//! oracles as the fuzz targets (`fuzz/src/`) with proptest's own generation and shrinking, plus
//! properties of the policy's globs that need no filesystem.

use proptest::prelude::*;

use cyberos::skill::policy::{Policy, canonical_memory_path, compile_glob};

use crate::regressions::fuzzing::{dispatch::base_manifest, file_path, fixture, memory_path};

/// A path segment: names that exist in the fixtures, the special ones, and anything short.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "memories", "notes", "link", "link2", "a.md", "file.md", "t", "in", "a.txt", "sub",
            "link_out", "rel_out", "link_in", "dangling", "dangling_in", "loop", "chain",
            "file_link", "dd", "x", "y", "out", "new",
        ])
        .prop_map(str::to_owned),
        2 => prop::sample::select(vec![".", "..", ""]).prop_map(str::to_owned),
        1 => "[a-z.\\-]{1,6}",
    ]
}

fn path(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(segment(), 0..max).prop_map(|s| s.join("/"))
}

/// A glob segment: literals, and every kind of meta character.
fn glob_segment() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "memories", "notes", "a.md", "x", "in", "sub", "*", "**", "?", "*.md", "*.txt", "{a,b}",
        "[ab]", "a*", "*x",
    ])
    .prop_map(str::to_owned)
}

fn glob(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(glob_segment(), 1..max).prop_map(|s| s.join("/"))
}

fn policy_with(memory: &[String], files: &[String], domains: &[String]) -> Option<Policy> {
    let mut m = base_manifest();
    m.allowed_memory_scopes = memory.to_vec();
    m.allowed_files = files.to_vec();
    m.allowed_domains = domains.to_vec();
    Policy::from_manifest(&m).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn memory_paths_pass_the_fuzz_oracle(
        raw in path(8),
        lead in any::<bool>(),
        globs in prop::collection::vec(glob(4), 0..4),
        body in prop::option::of("[a-z\n]{0,8}"),
    ) {
        let raw = if lead { format!("/{raw}") } else { raw };
        memory_path::check(&raw, &globs, body.as_deref());
    }

    #[test]
    fn memory_canonicalisation_composes_and_never_climbs_above_the_root(
        a in path(6),
        b in path(6),
        ups in 0usize..4,
    ) {
        if let Ok(ca) = canonical_memory_path(&a) {
            prop_assert_eq!(
                canonical_memory_path(&format!("{a}/{b}")).ok(),
                canonical_memory_path(&format!("{ca}/{b}")).ok()
            );
        }
        // `..` at the root stays at the root.
        prop_assert_eq!(
            canonical_memory_path(&format!("{}{b}", "../".repeat(ups))).ok(),
            canonical_memory_path(&b).ok()
        );
    }

    #[test]
    fn file_paths_pass_the_fuzz_oracle(
        tail in path(10),
        globs in prop::collection::vec(glob(3), 0..3),
        write in any::<bool>(),
    ) {
        let action = if write {
            file_path::Action::Write { content: "w".into(), create_dirs: false }
        } else {
            file_path::Action::Read
        };
        file_path::check(&tail, &globs, &action);
    }

    #[test]
    fn a_glob_match_lies_in_the_globs_literal_tree(
        globs in prop::collection::vec(glob(5), 1..4),
        target in prop::collection::vec(
            prop::sample::select(vec!["memories", "notes", "a.md", "x", "in", "sub", "b.txt", "ab"]),
            1..6,
        ),
    ) {
        let target = target.join("/");
        let policy = policy_with(&globs, &[], &[]);
        prop_assume!(policy.is_some());
        let policy = policy.expect("assumed");
        let mut any = false;
        for g in &globs {
            let matched = compile_glob(g).expect("compiles").compile_matcher().is_match(&target);
            any |= matched;
            if matched {
                let segments: Vec<&str> = target.split('/').collect();
                prop_assert!(segments.starts_with(&fixture::literal_segments(g)), "{} matched {}", g, target);
            }
        }
        prop_assert_eq!(policy.memory_allowed(&target), any);

        // The same globs as absolute file globs behave the same below their root.
        let files: Vec<String> = globs.iter().map(|g| format!("/srv/{g}")).collect();
        let policy = policy_with(&[], &files, &[]).expect("compiles");
        let absolute = std::path::PathBuf::from(format!("/srv/{target}"));
        prop_assert_eq!(policy.file_allowed(&absolute), any);
        if any {
            prop_assert!(policy.file_roots().iter().any(|r| absolute.starts_with(r)));
        }
    }

    #[test]
    fn a_single_star_never_crosses_a_slash(
        dir in prop::collection::vec(prop::sample::select(vec!["a", "b", "memories"]), 0..3),
        target in prop::collection::vec("[a-z]{1,3}", 1..5),
    ) {
        let dir = dir.join("/");
        let glob = if dir.is_empty() { "*".to_owned() } else { format!("{dir}/*") };
        let target = target.join("/");
        let policy = policy_with(&[glob], &[], &[]).expect("compiles");
        if policy.memory_allowed(&target) {
            let depth = if dir.is_empty() { 0 } else { dir.split('/').count() };
            prop_assert_eq!(target.split('/').count(), depth + 1);
        }
    }

    #[test]
    fn a_subdomain_glob_never_admits_the_apex_or_a_look_alike(
        labels in prop::collection::vec("[a-z0-9][a-z0-9-]{0,5}", 1..4),
        sub in "[a-z0-9][a-z0-9-]{0,5}",
        glued in "[a-z0-9]{1,5}",
        upper in any::<bool>(),
        dot in any::<bool>(),
    ) {
        let apex = labels.join(".");
        let policy = policy_with(&[], &[], &[format!("*.{apex}")]).expect("compiles");
        let shape = |h: String| {
            let h = if upper { h.to_ascii_uppercase() } else { h };
            if dot { format!("{h}.") } else { h }
        };
        let mut hosts_out = vec![
            apex.clone(),
            format!("{glued}{apex}"),
            // Not subdomains either: an empty label where the `*` stands.
            format!(".{apex}"),
            format!("..{apex}"),
            format!("{sub}..{apex}"),
        ];
        // `<apex>.<sub>` is itself a subdomain when `<sub>` ends with `.<apex>` or is the apex.
        let beyond = format!("{apex}.{sub}");
        if !beyond.ends_with(&format!(".{apex}")) {
            hosts_out.push(beyond);
        }
        let hosts_in = [format!("{sub}.{apex}"), format!("{glued}.{sub}.{apex}")];
        for host in hosts_out {
            prop_assert!(!policy.domain_allowed(&shape(host.clone())), "admitted {}", host);
        }
        for host in hosts_in {
            prop_assert!(policy.domain_allowed(&shape(host.clone())), "refused {}", host);
        }
        let exact = policy_with(&[], &[], std::slice::from_ref(&apex)).expect("compiles");
        let subdomain = format!("{sub}.{apex}");
        prop_assert!(exact.domain_allowed(&shape(apex.clone())));
        prop_assert!(!exact.domain_allowed(&shape(subdomain)));
    }
}
