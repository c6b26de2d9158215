//! Open the files a user names after `--measured`, tell what each is from its first bytes, read
//! it with its reader and put the ranks together. A directory stands for the trace files in it
//! (`*.json`, `*.json.gz`, `*.sqlite`), in name order.

use super::checks::{check_rank, Flagged};
use super::classify::LayoutSizes;
use super::kineto::{self, JsonTrace};
use super::logs;
use super::nsys;
use super::pplan_trace;
use super::timeline::{Measured, MeasuredError, RankTrace, Source};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// What a file is, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Gzip,
    Sqlite,
    Json,
    Text,
}

const READ_BUFFER: usize = 1 << 20;

/// Largest training log read (bytes); see `read_one`.
pub const LOG_BYTES_MAX: u64 = 1 << 30;

fn sniff(path: &Path, file: &str) -> Result<Format, MeasuredError> {
    let mut head = [0u8; 256];
    let mut f = std::fs::File::open(path)
        .map_err(|e| MeasuredError::new(file, format!("cannot open: {e}")))?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(MeasuredError::new(file, format!("cannot read: {e}"))),
        }
    }
    let head = &head[..n];
    if head.is_empty() {
        return Err(MeasuredError::new(
            file,
            "empty file: expected a trace (.json, .json.gz), an Nsight Systems SQLite export or a training log",
        ));
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        return Ok(Format::Gzip);
    }
    if head.starts_with(b"SQLite format 3\0") {
        return Ok(Format::Sqlite);
    }
    // JSON starts with `{`, or with `[` and then an event object (`[titan]` and
    // `[2024-05-01 ...]` begin log lines).
    let text = head.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(head);
    let mut chars = text.iter().filter(|c| !c.is_ascii_whitespace());
    match (chars.next(), chars.next()) {
        (Some(b'{'), _) | (Some(b'['), Some(b'{' | b']')) => Ok(Format::Json),
        _ => Ok(Format::Text),
    }
}

/// One file's contents.
enum Read1 {
    /// A Kineto trace, its `distributedInfo` rank and world size, what was flagged.
    Kineto(RankTrace, Option<u32>, Option<u32>, Flagged),
    Pplan(Vec<RankTrace>),
    Nsys(Vec<RankTrace>),
    Log(Source, Vec<super::timeline::LogIteration>),
}

fn read_one(path: &Path, file: &str, layout: Option<LayoutSizes>) -> Result<Read1, MeasuredError> {
    let open = || {
        std::fs::File::open(path).map_err(|e| MeasuredError::new(file, format!("cannot open: {e}")))
    };
    let json = |r: Box<dyn BufRead>| -> Result<Read1, MeasuredError> {
        Ok(match kineto::read(r, file, layout)? {
            JsonTrace::Kineto {
                trace,
                rank,
                world_size,
                flagged,
            } => Read1::Kineto(trace, rank, world_size, flagged),
            JsonTrace::Pplan(ev) => Read1::Pplan(pplan_trace::build(ev, file)?),
        })
    };
    match sniff(path, file)? {
        Format::Json => json(Box::new(BufReader::with_capacity(READ_BUFFER, open()?))),
        Format::Gzip => json(Box::new(BufReader::with_capacity(
            READ_BUFFER,
            flate2::read::MultiGzDecoder::new(BufReader::new(open()?)),
        ))),
        Format::Sqlite => Ok(Read1::Nsys(nsys::read(path, file)?)),
        Format::Text => {
            // A log is read whole (its lines are matched in memory, about 1.4 times its size):
            // bound it so that memory stays bounded. A log of 1 GiB holds 2.5 million
            // Megatron-LM iteration lines, decades of training at one line a step.
            let size = std::fs::metadata(path)
                .map_err(|e| MeasuredError::new(file, format!("cannot read: {e}")))?
                .len();
            if size > LOG_BYTES_MAX {
                return Err(MeasuredError::new(
                    file,
                    format!(
                        "a text file of {size} bytes, more than the {LOG_BYTES_MAX} (1 GiB) a \
                         training log is read up to; keep the iteration lines \
                         (grep 'elapsed time per iteration' or grep 'step:')"
                    ),
                ));
            }
            let bytes = std::fs::read(path)
                .map_err(|e| MeasuredError::new(file, format!("cannot read: {e}")))?;
            let text = String::from_utf8_lossy(&bytes);
            if logs::sniff(&text).is_none() {
                return Err(MeasuredError::new(
                    file,
                    "not a trace or log pplan reads: expected a Chrome/Kineto trace (.json, \
                     .json.gz), an Nsight Systems SQLite export (nsys export --type sqlite), \
                     a Megatron-LM log (iteration lines) or a torchtitan log (step lines)",
                ));
            }
            let (source, iterations) = logs::read(&text, file)?;
            Ok(Read1::Log(source, iterations))
        }
    }
}

/// The files a path stands for: itself, or a directory's trace files in name order.
fn expand(path: &Path) -> Result<Vec<PathBuf>, MeasuredError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let dir = path.display().to_string();
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| MeasuredError::new(&dir, format!("cannot list: {e}")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".json") || n.ends_with(".json.gz") || n.ends_with(".sqlite")
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(MeasuredError::new(
            dir,
            "a directory without trace files (*.json, *.json.gz, *.sqlite)",
        ));
    }
    Ok(files)
}

/// The rank a file name says (`rank-3.json`, `rank3.pt.trace.json.gz`, `trace_rank_12.json`).
fn rank_in_name(file: &str) -> Option<u32> {
    let name = Path::new(file)
        .file_name()?
        .to_string_lossy()
        .to_lowercase();
    let at = name.find("rank")?;
    let digits: String = name[at + 4..]
        .trim_start_matches(['-', '_'])
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Read the measured run from `paths`. `layout` (from a plan) lets collectives be attributed
/// to a parallel dimension by their group size.
pub fn load(paths: &[PathBuf], layout: Option<LayoutSizes>) -> Result<Measured, MeasuredError> {
    let mut files = Vec::new();
    for p in paths {
        files.extend(expand(p)?);
    }
    let mut source: Option<(Source, String)> = None;
    let mut ranks: BTreeMap<u32, RankTrace> = BTreeMap::new();
    let mut iterations = Vec::new();
    let mut flagged = Flagged::default();
    // The world size the traces state (Kineto's distributedInfo.world_size) and its file.
    let mut world: Option<(u32, String)> = None;
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    for (i, (path, file)) in files.iter().zip(&names).enumerate() {
        let got = read_one(path, file, layout)?;
        let kind = match &got {
            Read1::Kineto(..) => Source::Kineto,
            Read1::Pplan(_) => Source::Pplan,
            Read1::Nsys(_) => Source::Nsys,
            Read1::Log(s, _) => *s,
        };
        match &source {
            Some((s, first)) if *s != kind => {
                return Err(MeasuredError::new(
                    file,
                    format!(
                        "is a {}, but {first} is a {}: give one kind of measurement at a time",
                        kind.as_str(),
                        s.as_str()
                    ),
                ))
            }
            Some((s, first))
                if matches!(
                    s,
                    Source::Pplan | Source::MegatronLog | Source::TorchtitanLog
                ) =>
            {
                return Err(MeasuredError::new(
                    file,
                    format!(
                        "a second {} after {first}: one such file holds the whole run; give one",
                        s.as_str()
                    ),
                ))
            }
            _ => source = Some((kind, file.clone())),
        }
        let mut put = |mut t: RankTrace, rank: u32| -> Result<(), MeasuredError> {
            t.rank = rank;
            if let Some(prev) = ranks.get(&rank) {
                return Err(MeasuredError::new(
                    file,
                    format!(
                        "mismatched ranks: rank {rank} is also in {}; give each rank's trace once",
                        prev.file
                    ),
                ));
            }
            ranks.insert(rank, t);
            Ok(())
        };
        match got {
            Read1::Kineto(mut t, rank, world_size, f) => {
                flagged.add(f);
                if let Some(w) = world_size {
                    match &world {
                        Some((w0, f0)) if *w0 != w => {
                            return Err(MeasuredError::new(
                                file,
                                format!(
                                    "distributedInfo.world_size is {w}, but {f0} says {w0}: \
                                     give the traces of one run"
                                ),
                            ))
                        }
                        Some(_) => {}
                        None => world = Some((w, file.clone())),
                    }
                }
                let rank = rank.or_else(|| rank_in_name(file)).unwrap_or(i as u32);
                t.rank = rank;
                flagged.add(check_rank(&t)?);
                put(t, rank)?;
            }
            Read1::Nsys(ts) => {
                for t in ts {
                    flagged.add(check_rank(&t)?);
                    let r = t.rank;
                    put(t, r)?;
                }
            }
            Read1::Pplan(ts) => {
                for t in ts {
                    let r = t.rank;
                    put(t, r)?;
                }
            }
            Read1::Log(_, its) => iterations = its,
        }
    }
    let Some((source, _)) = source else {
        return Err(MeasuredError::new("--measured", "no file given"));
    };
    if let Some(l) = layout.filter(|_| matches!(source, Source::Kineto | Source::Nsys)) {
        check_world(l, world.as_ref(), &ranks)?;
    }
    // Actions named without a stage (single-stage schedules) run the rank's pipeline stage:
    // with a plan, ⌊rank / (t·cp·d)⌋ mod p (pipeline outermost, as Megatron-LM and torchtitan
    // order ranks); without one, the rank's position among the ranks given.
    for (position, r) in ranks.values_mut().enumerate() {
        let stage = layout.map_or(position as u32, |l| l.pipeline_rank(r.rank));
        for a in &mut r.actions {
            if a.action.stage == super::timeline::STAGE_OF_RANK {
                a.action.stage = stage;
            }
        }
    }
    // Traces without step markers are one step, over all ranks (as a pplan trace is): its
    // window is the span of every rank's activity, so the step time is the makespan.
    if !ranks.is_empty() && ranks.values().all(|r| r.steps.is_empty()) {
        let spans = ranks.values().flat_map(|r| {
            r.kernels
                .iter()
                .map(|k| (k.start_ns, k.end_ns))
                .chain(r.actions.iter().map(|a| (a.start_ns, a.end_ns)))
        });
        let (start_ns, end_ns) =
            spans.fold((i64::MAX, i64::MIN), |(s, e), (a, b)| (s.min(a), e.max(b)));
        if start_ns <= end_ns {
            for r in ranks.values_mut() {
                r.steps = vec![super::timeline::StepWindow {
                    id: 0,
                    start_ns,
                    end_ns,
                }];
            }
        }
    }
    Ok(Measured {
        source,
        files: names,
        ranks: ranks.into_values().collect(),
        iterations,
        flagged,
    })
}

/// The traces beside a plan must come from a run of the plan's size: a world size other than
/// the plan's GPUs (t·cp·p·d), or a rank beyond it, is another run, and comparing it would
/// print a plausible error for the wrong job.
fn check_world(
    l: LayoutSizes,
    world: Option<&(u32, String)>,
    ranks: &BTreeMap<u32, RankTrace>,
) -> Result<(), MeasuredError> {
    let gpus = u64::from(l.tp) * u64::from(l.cp) * u64::from(l.pp) * u64::from(l.dp);
    let layout = format!(
        "the plan's {gpus} GPUs (tp {} x cp {} x pp {} x dp {})",
        l.tp, l.cp, l.pp, l.dp
    );
    if let Some((w, file)) = world {
        if u64::from(*w) != gpus {
            return Err(MeasuredError::new(
                file,
                format!(
                    "distributedInfo.world_size is {w}, not {layout}: the traces are of another \
                     run; give the plan the run was made with"
                ),
            ));
        }
    }
    if let Some(r) = ranks.values().find(|r| u64::from(r.rank) >= gpus) {
        return Err(MeasuredError::new(
            &r.file,
            format!(
                "rank {} is beyond {layout} (ranks 0 to {}): the traces are of another run; \
                 give the plan the run was made with",
                r.rank,
                gpus.saturating_sub(1)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_file_names() {
        assert_eq!(rank_in_name("dir/rank-3.json"), Some(3));
        assert_eq!(rank_in_name("rank12.Apr_03.pt.trace.json.gz"), Some(12));
        assert_eq!(rank_in_name("trace_rank_7.json"), Some(7));
        assert_eq!(rank_in_name("trace.json"), None);
    }
}
