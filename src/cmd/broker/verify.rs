//! `skill broker verify`: walks the whole hash chain; exit 3 names the first bad row.

use std::path::Path;

use crate::exit;

pub fn run(home: &Path) -> anyhow::Result<u8> {
    let path = home.join("journal.db");
    let Some(journal) = super::open(home)? else {
        return Err(exit::coded(
            exit::ERROR,
            format!("no journal at {}", path.display()),
        ));
    };
    let report = journal.verify()?;
    if let Some(broken) = report.broken {
        return Err(exit::coded(
            exit::CHAIN_BROKEN,
            format!("journal {}: hash chain broken at {broken}", path.display()),
        ));
    }
    let span = if report.rows == 0 {
        "no rows".to_owned()
    } else {
        format!(
            "{} rows (seq {}..{})",
            report.rows,
            report.anchor_seq + 1,
            report.last_seq
        )
    };
    let checkpoint = if report.anchor_seq > 0 {
        format!(", after the checkpoint at seq {}", report.anchor_seq)
    } else {
        String::new()
    };
    println!(
        "journal intact: {span}{checkpoint}; head {}",
        hex::encode(report.last_hash)
    );
    Ok(exit::SUCCESS)
}
