//! Nsight Systems SQLite exports (`nsys export --type sqlite report.nsys-rep`): GPU kernels,
//! copies and memsets per device, the pipeline's actions and the optimizer steps from NVTX
//! ranges (docs/validate.md, "Readers: Nsight Systems and logs").
//!
//! Tables and columns read (all times integer nanoseconds on the export's session clock):
//! - `CUPTI_ACTIVITY_KIND_KERNEL`: `start`, `end`, `deviceId`, `streamId`, `demangledName` /
//!   `shortName` (ids into `StringIds(id, value)`), and when present `correlationId`,
//!   `globalPid`;
//! - `CUPTI_ACTIVITY_KIND_MEMCPY`, `CUPTI_ACTIVITY_KIND_MEMSET` when present: the same times,
//!   device, stream, `copyKind`;
//! - `NVTX_EVENTS`: `start`, `end`, `text` or `textId`, `globalTid`; rows without an `end`
//!   (marks, thread and domain names) are not ranges and are skipped;
//! - `CUPTI_ACTIVITY_KIND_RUNTIME` when present: `globalTid`, `start`, `correlationId`, to tie
//!   each kernel to the CPU thread and time of its launch.

use super::timeline::{ActionSpan, Kernel, KernelClass, MeasuredError, RankTrace, StepWindow};
use crate::schedule::ir::Action;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
const NVTX: &str = "NVTX_EVENTS";
const STRINGS: &str = "StringIds";

/// Nsight's serialized global id: hardware and VM in the top 16 bits, then the process id in
/// bits 24..48, then the thread id in the low 24 bits. A thread's process is its id with the
/// thread bits cleared, which is how `globalPid` columns are written.
const TID_BITS: i64 = 0xFF_FFFF;

/// Read an export: one [`RankTrace`] per GPU device (or per process, when the export holds
/// several processes on one device).
///
/// Ranks: each kernel belongs to a (process, device) pair (`globalPid`, `deviceId`). When every
/// device is used by one process only, the rank is the `deviceId`; otherwise (several processes
/// on one device, as when each process sees its GPU as device 0) the ranks are 0, 1, ... over
/// the pairs in (process id, device) order.
///
/// Actions and steps: an NVTX range whose text is a compute action (`PP:0F1`, `0F1`, `1W0`)
/// becomes an [`ActionSpan`], one named `ProfilerStep#N`, `step N` or `iteration N` a
/// [`StepWindow`]. Its GPU time is [first start, last end] of the GPU activity launched by CUDA
/// runtime calls made on the range's thread inside the range (joined on `correlationId`); when
/// nothing launched in it can be found (no runtime table, no correlation ids, nothing launched)
/// the range's own CPU times are used, on every rank of its process. A kernel's or action's
/// step is the window containing its start, 0 when none does.
pub fn read(path: &Path, file: &str) -> Result<Vec<RankTrace>, MeasuredError> {
    let fail = |reason: String| MeasuredError::new(file, reason);
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| fail(format!("cannot open as SQLite: {e}")))?;
    let mut db = Db {
        conn,
        file,
        has_pid: false,
        has_strings: false,
    };
    let tables = db.tables()?;
    db.has_strings = tables.contains(STRINGS);
    if !tables.contains(KERNEL) {
        return Err(fail(format!(
            "not an Nsight Systems export: no table {KERNEL}; export the report with \
             `nsys export --type sqlite report.nsys-rep` from a profile taken with \
             `nsys profile --trace=cuda,nvtx`"
        )));
    }
    let strings = if tables.contains(STRINGS) {
        db.strings()?
    } else {
        HashMap::new()
    };

    let mut acts = db.kernels(&strings)?;
    if acts.is_empty() {
        return Err(fail(format!(
            "no GPU kernels: table {KERNEL} is empty; was the profile taken with --trace=cuda?"
        )));
    }
    for (table, memset) in [(MEMCPY, false), (MEMSET, true)] {
        if tables.contains(table) {
            acts.extend(db.copies(table, memset)?);
        }
    }

    // Ranks from (process, device) pairs.
    let pairs: BTreeSet<(i64, i64)> = acts.iter().map(|a| (a.pid, a.device)).collect();
    let devices: BTreeSet<i64> = pairs.iter().map(|&(_, d)| d).collect();
    let by_device = pairs.len() == devices.len();
    let mut rank_of: BTreeMap<(i64, i64), u32> = BTreeMap::new();
    for (i, &(pid, device)) in pairs.iter().enumerate() {
        let rank = if by_device { device } else { i as i64 };
        let rank = u32::try_from(rank).map_err(|_| {
            fail(format!(
                "table {KERNEL} column deviceId: {device} is not a device number (0 or more)"
            ))
        })?;
        rank_of.insert((pid, device), rank);
    }
    let rank_list: Vec<u32> = {
        let set: BTreeSet<u32> = rank_of.values().copied().collect();
        set.into_iter().collect()
    };
    let slot = |r: u32| rank_list.binary_search(&r).unwrap_or(0);
    let mut ranks: Vec<RankTrace> = rank_list
        .iter()
        .map(|&rank| RankTrace {
            rank,
            file: file.to_string(),
            ..RankTrace::default()
        })
        .collect();
    let mut interned: Vec<HashMap<String, u32>> = vec![HashMap::new(); ranks.len()];
    // For each activity: (rank slot, index in that rank's kernels), in `acts` order.
    let mut placed: Vec<(usize, usize)> = Vec::with_capacity(acts.len());
    for a in &acts {
        let s = slot(rank_of[&(a.pid, a.device)]);
        let names = &mut ranks[s].names;
        let name = *interned[s].entry(a.name.clone()).or_insert_with(|| {
            names.push(a.name.clone());
            (names.len() - 1) as u32
        });
        placed.push((s, ranks[s].kernels.len()));
        ranks[s].kernels.push(Kernel {
            start_ns: a.start,
            end_ns: a.end,
            stream: a.stream,
            class: a.class,
            name,
            step: 0,
            group_size: None,
        });
    }

    // NVTX ranges that name actions or steps, projected onto the GPU.
    let ranges = if tables.contains(NVTX) {
        db.nvtx(&strings)?
    } else {
        Vec::new()
    };
    if !ranges.is_empty() {
        let launches = if tables.contains(RUNTIME) {
            // Correlation ids tie launches to activities within one process (`pid` is 0 for
            // every activity when the export does not tell processes apart).
            let mut by_corr: HashMap<(i64, i64), Vec<usize>> = HashMap::new();
            for (i, a) in acts.iter().enumerate() {
                if let Some(c) = a.correlation {
                    by_corr.entry((a.pid, c)).or_default().push(i);
                }
            }
            db.launches(&by_corr)?
        } else {
            HashMap::new()
        };
        let pid_ranks = |pid: Option<i64>| -> Vec<usize> {
            let mut v: Vec<usize> = rank_of
                .iter()
                .filter(|((p, _), _)| pid.is_none_or(|pid| !db.has_pid || *p == pid))
                .map(|(_, &r)| slot(r))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        for r in &ranges {
            // GPU extent per rank slot of what this range launched.
            let mut extent: BTreeMap<usize, (i64, i64)> = BTreeMap::new();
            if let Some(list) = r.tid.and_then(|t| launches.get(&t)) {
                let from = list.partition_point(|l| l.0 < r.start);
                for l in list[from..].iter().take_while(|l| l.0 <= r.end) {
                    for &i in &l.1 {
                        let (s, k) = placed[i];
                        let kk = &ranks[s].kernels[k];
                        let e = extent.entry(s).or_insert((kk.start_ns, kk.end_ns));
                        e.0 = e.0.min(kk.start_ns);
                        e.1 = e.1.max(kk.end_ns);
                    }
                }
            }
            if extent.is_empty() {
                let pid = r.tid.map(|t| t & !TID_BITS);
                for s in pid_ranks(pid) {
                    extent.insert(s, (r.start, r.end));
                }
            }
            for (s, (start_ns, end_ns)) in extent {
                match r.what {
                    Named::Action(action) => ranks[s].actions.push(ActionSpan {
                        action,
                        start_ns,
                        end_ns,
                        step: 0,
                    }),
                    Named::Step(id) => ranks[s].steps.push(StepWindow {
                        id,
                        start_ns,
                        end_ns,
                    }),
                }
            }
        }
    }

    for rank in &mut ranks {
        rank.kernels
            .sort_by_key(|k| (k.start_ns, k.end_ns, k.stream));
        rank.actions.sort_by_key(|a| (a.start_ns, a.end_ns));
        rank.steps.sort_by_key(|w| (w.start_ns, w.end_ns, w.id));
        let steps = rank.steps.clone();
        for k in &mut rank.kernels {
            k.step = step_of(&steps, k.start_ns);
        }
        for a in &mut rank.actions {
            a.step = step_of(&steps, a.start_ns);
        }
    }
    Ok(ranks)
}

/// The index of the last window starting at or before `t` that still contains it; 0 if none.
fn step_of(steps: &[StepWindow], t: i64) -> u32 {
    let n = steps.partition_point(|w| w.start_ns <= t);
    steps[..n]
        .iter()
        .rposition(|w| t <= w.end_ns)
        .map_or(0, |i| i as u32)
}

/// What an NVTX range names.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Named {
    Action(Action),
    Step(u64),
}

/// A pipeline action (`PP:0F1`, `0F1`, `Forward 3`), or a step (`ProfilerStep#12`, `step 12`,
/// `iteration 12`, `Step_12`); `None` for every other range name.
fn named(text: &str) -> Option<Named> {
    let t = text.trim();
    if let Some(a) = super::classify::action_from_range(t) {
        return Some(Named::Action(a));
    }
    let lower = t.to_ascii_lowercase();
    for prefix in ["profilerstep", "iteration", "step"] {
        if let Some(rest) = lower.strip_prefix(prefix) {
            let rest = rest.trim_start_matches(['#', ' ', '_', ':', '-']);
            if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
                return rest.parse().ok().map(Named::Step);
            }
        }
    }
    None
}

/// One GPU activity as read, before it is placed on a rank.
struct Activity {
    start: i64,
    end: i64,
    device: i64,
    stream: u32,
    pid: i64,
    correlation: Option<i64>,
    name: String,
    class: KernelClass,
}

/// An NVTX range naming an action or a step.
struct Range {
    start: i64,
    end: i64,
    tid: Option<i64>,
    what: Named,
}

/// Launches per CPU thread, sorted by start: (launch start, indices into the activities).
type Launches = HashMap<i64, Vec<(i64, Vec<usize>)>>;

struct Db<'a> {
    conn: Connection,
    file: &'a str,
    /// Whether the kernel table has `globalPid` (processes can be told apart).
    has_pid: bool,
    /// Whether the export has the `StringIds` table names are looked up in.
    has_strings: bool,
}

impl Db<'_> {
    fn err(&self, what: &str, e: rusqlite::Error) -> MeasuredError {
        let reason = match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => format!(
                "not a SQLite file ({e}); expected an Nsight Systems export written by \
                 `nsys export --type sqlite`"
            ),
            Some(ErrorCode::DatabaseCorrupt) => format!(
                "damaged or truncated SQLite file while reading {what} ({e}); export it again \
                 with `nsys export --type sqlite`"
            ),
            _ => format!("reading {what}: {e}"),
        };
        MeasuredError::new(self.file, reason)
    }

    fn tables(&self) -> Result<HashSet<String>, MeasuredError> {
        let what = "the table list";
        let mut stmt = self
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
            .map_err(|e| self.err(what, e))?;
        let names = stmt
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(|e| self.err(what, e))?
            .collect::<Result<HashSet<String>, _>>()
            .map_err(|e| self.err(what, e))?;
        Ok(names)
    }

    fn columns(&self, table: &str) -> Result<HashSet<String>, MeasuredError> {
        let what = format!("the columns of {table}");
        let mut stmt = self
            .conn
            .prepare(&format!("PRAGMA table_info(\"{table}\")"))
            .map_err(|e| self.err(&what, e))?;
        let cols = stmt
            .query_map([], |row| row.get::<_, String>(1))
            .map_err(|e| self.err(&what, e))?
            .collect::<Result<HashSet<String>, _>>()
            .map_err(|e| self.err(&what, e))?;
        Ok(cols)
    }

    /// `SELECT` the columns of `table` (`None` where an optional column is absent), calling
    /// `each` on every row. A missing required column is an error naming it.
    fn select(
        &self,
        table: &str,
        required: &[&str],
        optional: &[&str],
        filter: &str,
        mut each: impl FnMut(&[Option<Cell>]) -> Result<(), MeasuredError>,
    ) -> Result<(), MeasuredError> {
        let have = self.columns(table)?;
        if let Some(missing) = required.iter().find(|c| !have.contains(**c)) {
            return Err(MeasuredError::new(
                self.file,
                format!(
                    "table {table} has no column '{missing}' (an Nsight Systems export has {}); \
                     export it again with a current `nsys export --type sqlite`",
                    required.join(", ")
                ),
            ));
        }
        let cols: Vec<&str> = required.iter().chain(optional).copied().collect();
        let exprs: Vec<String> = cols
            .iter()
            .map(|c| {
                if have.contains(*c) {
                    format!("\"{c}\"")
                } else {
                    "NULL".to_string()
                }
            })
            .collect();
        let sql = format!("SELECT {} FROM \"{table}\" {filter}", exprs.join(", "));
        let what = format!("table {table}");
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(&what, e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(&what, e))?;
        let mut cells: Vec<Option<Cell>> = Vec::with_capacity(cols.len());
        while let Some(row) = rows.next().map_err(|e| self.err(&what, e))? {
            cells.clear();
            for (i, col) in cols.iter().enumerate() {
                let v = row.get_ref(i).map_err(|e| self.err(&what, e))?;
                cells.push(match v {
                    ValueRef::Null => None,
                    ValueRef::Integer(n) => Some(Cell::Int(n)),
                    ValueRef::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => {
                        Some(Cell::Int(f as i64))
                    }
                    ValueRef::Text(t) => Some(Cell::Text(String::from_utf8_lossy(t).into_owned())),
                    _ => {
                        return Err(MeasuredError::new(
                            self.file,
                            format!(
                                "table {table} column {col}: expected an integer or text, found \
                                 {:?}",
                                v.data_type()
                            ),
                        ))
                    }
                });
            }
            each(&cells)?;
        }
        Ok(())
    }

    fn strings(&self) -> Result<HashMap<i64, String>, MeasuredError> {
        let mut map = HashMap::new();
        self.select(STRINGS, &["id", "value"], &[], "", |c| {
            if let (Some(Cell::Int(id)), Some(v)) = (&c[0], &c[1]) {
                map.insert(*id, v.text());
            }
            Ok(())
        })?;
        Ok(map)
    }

    fn int(&self, table: &str, col: &str, cell: &Option<Cell>) -> Result<i64, MeasuredError> {
        match cell {
            Some(Cell::Int(n)) => Ok(*n),
            other => Err(MeasuredError::new(
                self.file,
                format!(
                    "table {table} column {col}: expected an integer, found {}",
                    other
                        .as_ref()
                        .map_or("NULL".to_string(), |c| format!("'{}'", c.text()))
                ),
            )),
        }
    }

    /// A row's times: an activity ends at or after it starts (CUPTI writes an unfinished
    /// record's end as 0 or before its start; counting it would drop or invert its time).
    fn times(&self, table: &str, name: &str, start: i64, end: i64) -> Result<(), MeasuredError> {
        if end < start {
            return Err(MeasuredError::new(
                self.file,
                format!(
                    "table {table}: '{name}' ends (end {end} ns) before it starts (start {start} \
                     ns): an unfinished or damaged record; export the report again after the \
                     profiled process has finished"
                ),
            ));
        }
        Ok(())
    }

    /// A CUDA device id: 0 or more (CUPTI numbers devices from 0).
    fn device(&self, table: &str, cell: &Option<Cell>) -> Result<i64, MeasuredError> {
        let d = self.int(table, "deviceId", cell)?;
        if !(0..=i64::from(u32::MAX)).contains(&d) {
            return Err(MeasuredError::new(
                self.file,
                format!("table {table} column deviceId: {d} is not a device number (0 or more)"),
            ));
        }
        Ok(d)
    }

    fn stream(&self, table: &str, cell: &Option<Cell>) -> Result<u32, MeasuredError> {
        let s = self.int(table, "streamId", cell)?;
        u32::try_from(s).map_err(|_| {
            MeasuredError::new(
                self.file,
                format!("table {table} column streamId: {s} is not a stream id (0 to 2^32-1)"),
            )
        })
    }

    /// A name column: a `StringIds` id, or the text itself in exports that store it inline.
    fn name(
        &self,
        strings: &HashMap<i64, String>,
        table: &str,
        col: &str,
        cell: &Option<Cell>,
    ) -> Result<Option<String>, MeasuredError> {
        match cell {
            None => Ok(None),
            Some(Cell::Text(t)) => Ok(Some(t.clone())),
            Some(Cell::Int(id)) => strings.get(id).cloned().map(Some).ok_or_else(|| {
                let why = if self.has_strings {
                    format!("string id {id} is not in table {STRINGS} (id, value)")
                } else {
                    format!(
                        "string id {id}, but the export has no table {STRINGS} (id, value) to \
                         look names up in: export it again with `nsys export --type sqlite`"
                    )
                };
                MeasuredError::new(self.file, format!("table {table} column {col}: {why}"))
            }),
        }
    }

    fn kernels(&mut self, strings: &HashMap<i64, String>) -> Result<Vec<Activity>, MeasuredError> {
        self.has_pid = self.columns(KERNEL)?.contains("globalPid");
        let names_present = {
            let have = self.columns(KERNEL)?;
            have.contains("demangledName") || have.contains("shortName")
        };
        if !names_present {
            return Err(MeasuredError::new(
                self.file,
                format!(
                    "table {KERNEL} has neither column 'demangledName' nor 'shortName': kernels \
                     cannot be classified"
                ),
            ));
        }
        let mut out = Vec::new();
        // Classes by name, computed once per distinct name (exports repeat a few hundred names).
        let mut classes: HashMap<String, KernelClass> = HashMap::new();
        self.select(
            KERNEL,
            &["start", "end", "deviceId", "streamId"],
            &["demangledName", "shortName", "correlationId", "globalPid"],
            "",
            |c| {
                let start = self.int(KERNEL, "start", &c[0])?;
                let end = self.int(KERNEL, "end", &c[1])?;
                let name = match self.name(strings, KERNEL, "demangledName", &c[4])? {
                    Some(n) if !n.is_empty() => n,
                    _ => self
                        .name(strings, KERNEL, "shortName", &c[5])?
                        .unwrap_or_else(|| "(unnamed kernel)".to_string()),
                };
                self.times(KERNEL, &name, start, end)?;
                out.push(Activity {
                    start,
                    end,
                    device: self.device(KERNEL, &c[2])?,
                    stream: self.stream(KERNEL, &c[3])?,
                    pid: match &c[7] {
                        Some(Cell::Int(p)) => *p,
                        _ => 0,
                    },
                    correlation: match &c[6] {
                        Some(Cell::Int(n)) => Some(*n),
                        _ => None,
                    },
                    class: *classes
                        .entry(name.clone())
                        .or_insert_with(|| super::kernels::kernel_class(&name)),
                    name,
                });
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// Copies (named by direction, as Nsight shows them) or memsets: class Memory.
    fn copies(&self, table: &str, memset: bool) -> Result<Vec<Activity>, MeasuredError> {
        let mut out = Vec::new();
        self.select(
            table,
            &["start", "end", "deviceId", "streamId"],
            &["copyKind", "correlationId", "globalPid"],
            "",
            |c| {
                let start = self.int(table, "start", &c[0])?;
                let end = self.int(table, "end", &c[1])?;
                self.times(table, if memset { "Memset" } else { "Memcpy" }, start, end)?;
                let name = if memset {
                    "Memset".to_string()
                } else {
                    // CUpti_ActivityMemcpyKind.
                    let dir = match &c[4] {
                        Some(Cell::Int(1)) => " HtoD",
                        Some(Cell::Int(2)) => " DtoH",
                        Some(Cell::Int(8)) => " DtoD",
                        Some(Cell::Int(9)) => " HtoH",
                        Some(Cell::Int(10)) => " PtoP",
                        _ => "",
                    };
                    format!("Memcpy{dir}")
                };
                out.push(Activity {
                    start,
                    end,
                    device: self.device(table, &c[2])?,
                    stream: self.stream(table, &c[3])?,
                    pid: match &c[6] {
                        Some(Cell::Int(p)) if self.has_pid => *p,
                        _ => 0,
                    },
                    correlation: match &c[5] {
                        Some(Cell::Int(n)) => Some(*n),
                        _ => None,
                    },
                    name,
                    class: KernelClass::Memory,
                });
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// NVTX ranges (rows with an end) whose text names an action or a step.
    fn nvtx(&self, strings: &HashMap<i64, String>) -> Result<Vec<Range>, MeasuredError> {
        let mut out = Vec::new();
        self.select(
            NVTX,
            &["start", "end"],
            &["text", "textId", "globalTid"],
            "WHERE \"end\" IS NOT NULL",
            |c| {
                let start = self.int(NVTX, "start", &c[0])?;
                let end = self.int(NVTX, "end", &c[1])?;
                let text = match self.name(strings, NVTX, "text", &c[2])? {
                    Some(t) => Some(t),
                    None => self.name(strings, NVTX, "textId", &c[3])?,
                };
                let Some(text) = text else {
                    return Ok(());
                };
                if let Some(what) = named(&text) {
                    // A range the breakdown uses (an action, a step) must be a range.
                    self.times(NVTX, &text, start, end)?;
                    out.push(Range {
                        start,
                        end,
                        tid: match &c[4] {
                            Some(Cell::Int(t)) => Some(*t),
                            _ => None,
                        },
                        what,
                    });
                }
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// CUDA runtime calls that launched one of the activities (`by_corr`: (process,
    /// correlation id) → activity indices), per calling thread, sorted by start.
    fn launches(
        &self,
        by_corr: &HashMap<(i64, i64), Vec<usize>>,
    ) -> Result<Launches, MeasuredError> {
        let mut out: Launches = HashMap::new();
        if by_corr.is_empty() {
            return Ok(out);
        }
        let mut seen: HashSet<(i64, i64)> = HashSet::new();
        self.select(
            RUNTIME,
            &["start", "globalTid", "correlationId"],
            &[],
            "WHERE \"correlationId\" IS NOT NULL AND \"globalTid\" IS NOT NULL",
            |c| {
                let start = self.int(RUNTIME, "start", &c[0])?;
                let tid = self.int(RUNTIME, "globalTid", &c[1])?;
                let corr = self.int(RUNTIME, "correlationId", &c[2])?;
                let pid = if self.has_pid { tid & !TID_BITS } else { 0 };
                // Nsight records some calls twice (`cudaLaunchKernel` and its versioned
                // entry point) with one correlation id: the first one counts.
                if let Some(acts) = by_corr.get(&(pid, corr)) {
                    if seen.insert((pid, corr)) {
                        out.entry(tid).or_default().push((start, acts.clone()));
                    }
                }
                Ok(())
            },
        )?;
        for list in out.values_mut() {
            list.sort_by_key(|l| l.0);
        }
        Ok(out)
    }
}

/// One SQLite value as read.
enum Cell {
    Int(i64),
    Text(String),
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::Int(n) => n.to_string(),
            Cell::Text(t) => t.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_names() {
        assert_eq!(named("PP:0F1"), Some(Named::Action(Action::f(0, 1))));
        assert_eq!(named("1W0"), Some(Named::Action(Action::w(1, 0))));
        assert_eq!(named("ProfilerStep#12"), Some(Named::Step(12)));
        assert_eq!(named("step 3"), Some(Named::Step(3)));
        assert_eq!(named("iteration 7"), Some(Named::Step(7)));
        // Megatron's nvtx_range_push names and NCCL's ranges are neither.
        assert_eq!(named("forward-backward"), None);
        assert_eq!(named("optimizer"), None);
        assert_eq!(named("ncclAllReduce"), None);
        assert_eq!(named("saxpy"), None);
    }

    #[test]
    fn steps_by_start() {
        let w = |id, s, e| StepWindow {
            id,
            start_ns: s,
            end_ns: e,
        };
        let steps = [w(1, 10, 20), w(2, 30, 40)];
        assert_eq!(step_of(&steps, 5), 0);
        assert_eq!(step_of(&steps, 15), 0);
        assert_eq!(step_of(&steps, 35), 1);
        assert_eq!(step_of(&steps, 25), 0);
        assert_eq!(step_of(&steps, 45), 0);
    }
}
