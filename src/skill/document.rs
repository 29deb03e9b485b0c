//! Splits a SKILL.md into its YAML frontmatter and markdown body (CONTRACT §3): `---` on line 1,
//! a closing `---` line, then the body. Trailing whitespace after either fence and CRLF line ends
//! are tolerated; a `---` line in the body is just text. This module only cuts text; it never
//! interprets the YAML.

use crate::skill::rules::{ErrorCode, FieldError};

/// A SKILL.md cut at its fences, borrowing from the file's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Document<'a> {
    /// The YAML between the fences (line ends as written).
    pub frontmatter: &'a str,
    /// Everything after the closing fence's line.
    pub body: &'a str,
    /// Byte range of the frontmatter in the text (for rewriting it in place).
    pub frontmatter_start: usize,
    pub frontmatter_end: usize,
}

/// An editor's UTF-8 byte-order mark is skipped: it is invisible and not part of line 1's text.
const BOM: char = '\u{feff}';

fn is_fence(line: &str) -> bool {
    // `line` excludes its `\n`; a `\r` before it and any trailing blanks are tolerated.
    line.strip_prefix("---")
        .is_some_and(|rest| rest.trim_end_matches([' ', '\t', '\r']).is_empty())
}

/// Cuts `text` at its fences.
pub fn split(text: &str) -> Result<Document<'_>, FieldError> {
    let start = if text.starts_with(BOM) {
        BOM.len_utf8()
    } else {
        0
    };
    let rest = &text[start..];
    let (first, after_first) = match rest.find('\n') {
        Some(i) => (&rest[..i], start + i + 1),
        None => (rest, text.len()),
    };
    if !is_fence(first) {
        return Err(FieldError::new(
            "",
            ErrorCode::Fence,
            "SKILL.md must start with a `---` line, then the YAML frontmatter and a closing `---` line",
        ));
    }
    let mut pos = after_first;
    while pos < text.len() {
        let (line, next) = match text[pos..].find('\n') {
            Some(i) => (&text[pos..pos + i], pos + i + 1),
            None => (&text[pos..], text.len()),
        };
        if is_fence(line) {
            return Ok(Document {
                frontmatter: &text[after_first..pos],
                body: &text[next..],
                frontmatter_start: after_first,
                frontmatter_end: pos,
            });
        }
        pos = next;
    }
    Err(FieldError::new(
        "",
        ErrorCode::Fence,
        "the frontmatter has no closing `---` line",
    ))
}

/// The body as it is signed: CRLF → LF, then leading and trailing whitespace (Unicode
/// White_Space, as `str::trim`) removed.
pub fn normalised_body(body: &str) -> String {
    body.replace("\r\n", "\n").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_tolerate_crlf_trailing_blanks_and_dashes_in_the_body() {
        let doc = split("---  \r\nid: a\r\n--- \t\r\nbody\n---\nmore\n").unwrap();
        assert_eq!(doc.frontmatter, "id: a\r\n");
        assert_eq!(doc.body, "body\n---\nmore\n");
        let doc = split("\u{feff}---\n---").unwrap();
        assert_eq!((doc.frontmatter, doc.body), ("", ""));
    }

    #[test]
    fn missing_fences_are_refused() {
        for text in [
            "",
            "id: a\n---\n",
            "----\nid: a\n---\n",
            " ---\n---\n",
            "---\nid: a\n",
            "---\nid: a\n----\n",
        ] {
            assert_eq!(split(text).unwrap_err().code, ErrorCode::Fence, "{text:?}");
        }
    }

    #[test]
    fn the_signed_body_is_lf_and_trimmed() {
        assert_eq!(
            normalised_body("\r\n  Hello\r\nworld \r\n\n"),
            "Hello\nworld"
        );
    }
}
