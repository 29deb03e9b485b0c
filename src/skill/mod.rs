//! SKILL.md: the schema-v1 frontmatter (CONTRACT §3), its parser and validator, signatures, and
//! the policy compiled from it.

pub mod manifest;
pub mod policy;
