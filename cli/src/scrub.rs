//! `kvtier scrub`: reads every object of one adapter and checks it against the checksum stored
//! with it, through the actors ([`Verify`] to the controller, the checks on the backend's worker
//! pool), never by reading the store itself. Prints the corrupt objects; exits 1 when there is
//! one (or an object could not be read), 0 otherwise. `--delete` removes the corrupt objects as a
//! delete would (a locked key is kept) and usage follows.

use std::io::IsTerminal;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvtier::actors::{ListKeys, ObjectKey, Verdict, Verify};

use crate::common::ConfigArgs;

/// Keys per [`Verify`] request.
const BATCH: usize = 64;

/// `kvtier scrub` arguments.
#[derive(Debug, Clone, Args)]
pub struct ScrubArgs {
    /// Configuration.
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Which adapter to scrub (0-based).
    #[arg(long, default_value_t = 0)]
    pub adapter: usize,
    /// Remove the corrupt objects (locked keys are kept).
    #[arg(long)]
    pub delete: bool,
    /// One JSON object per corrupt object, then one summary line.
    #[arg(long)]
    pub json: bool,
}

/// What a scrub found.
#[derive(Debug, Default)]
struct Tally {
    checked: u64,
    corrupt: u64,
    unverifiable: u64,
    errors: u64,
    deleted: u64,
}

/// Runs the scrub on a started tier; `Err` (exit 1) when anything is corrupt or unreadable.
pub async fn run(tier: std::rc::Rc<kvtier::Tier>, args: ScrubArgs) -> Result<(), String> {
    let adapter = args.adapter;
    let mut keys: Vec<ObjectKey> = Vec::new();
    let mut cursor = None;
    loop {
        let page = tier
            .controller()
            .send(ListKeys {
                model: None,
                cursor: cursor.clone(),
                page_size: 1000,
                adapter,
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("adapter #{adapter}: {e}"))?;
        keys.extend(page.entries.into_iter().map(|(k, _)| k));
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let bar = if std::io::stderr().is_terminal() {
        let bar =
            ProgressBar::with_draw_target(Some(keys.len() as u64), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} objects",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut tally = Tally::default();
    for batch in keys.chunks(BATCH) {
        let report = tier
            .controller()
            .send(Verify {
                keys: batch.to_vec(),
                delete_corrupt: args.delete,
                adapter,
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("adapter #{adapter}: {e}"))?;
        for (key, verdict) in &report.results {
            let deleted = report.deleted.contains(key);
            match verdict {
                Ok(Verdict::Intact) => tally.checked += 1,
                Ok(Verdict::Unverifiable) => {
                    tally.checked += 1;
                    tally.unverifiable += 1;
                }
                Ok(Verdict::Absent) => {}
                Ok(Verdict::Corrupt(reason)) => {
                    tally.checked += 1;
                    tally.corrupt += 1;
                    tally.deleted += u64::from(deleted);
                    bar.suspend(|| print_corrupt(&args, key, reason, deleted));
                }
                Err(e) => {
                    tally.errors += 1;
                    bar.suspend(|| eprintln!("{key}: cannot be read: {e}"));
                }
            }
        }
        bar.inc(batch.len() as u64);
    }
    bar.finish_and_clear();
    if args.json {
        let mut summary = serde_json::json!({
            "checked": tally.checked,
            "corrupt": tally.corrupt,
            "unverifiable": tally.unverifiable,
        });
        if tally.errors > 0 {
            summary["errors"] = tally.errors.into();
        }
        if args.delete {
            summary["deleted"] = tally.deleted.into();
        }
        println!("{summary}");
    } else {
        eprintln!(
            "{} checked, {} corrupt{}, {} unverifiable (no checksum){}",
            tally.checked,
            tally.corrupt,
            if args.delete {
                format!(" ({} deleted)", tally.deleted)
            } else {
                String::new()
            },
            tally.unverifiable,
            if tally.errors > 0 {
                format!(", {} could not be read", tally.errors)
            } else {
                String::new()
            }
        );
    }
    if tally.corrupt > 0 || tally.errors > 0 {
        Err(format!(
            "adapter #{adapter}: {} corrupt object(s), {} unreadable",
            tally.corrupt, tally.errors
        ))
    } else {
        Ok(())
    }
}

fn print_corrupt(args: &ScrubArgs, key: &ObjectKey, reason: &str, deleted: bool) {
    if args.json {
        let mut v = serde_json::json!({
            "object": key.to_string(),
            "corrupt": true,
            "reason": reason,
        });
        if args.delete {
            v["deleted"] = deleted.into();
        }
        println!("{v}");
    } else {
        let note = match (args.delete, deleted) {
            (false, _) => "",
            (true, true) => " (deleted)",
            (true, false) => " (kept: locked or busy)",
        };
        println!("{key}\tcorrupt: {reason}{note}");
    }
}
