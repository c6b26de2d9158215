//! docs/validation.md's tables of published runs are `pplan validate --runs`'s output: for
//! every runs file in `data/runs/`, each table row and summary line the command prints for
//! that file appears in the page word for word, and so do the summary lines for all files at
//! once ("Every group"). A change to the model or the data cannot leave the page's figures
//! behind.

use pplan::runs::file::RunsFile;
use pplan::runs::validate::{load_rows, markdown, predict_rows, GroupBy};

fn page() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/validation.md")).unwrap()
}

fn runs_files() -> Vec<RunsFile> {
    RunsFile::load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data/runs").as_ref()).unwrap()
}

/// The lines of `report` missing from `page` (blank lines and the "Runs of FILE" headings,
/// which name the file as it was opened, are not compared).
fn missing<'a>(report: &'a str, page: &str) -> Vec<&'a str> {
    report
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("Runs of "))
        .filter(|l| !page.contains(l.trim_end()))
        .collect()
}

#[test]
fn every_runs_files_report_is_on_the_page() {
    let page = page();
    let files = runs_files();
    assert!(files.len() >= 14, "{} runs files", files.len());
    let rows = load_rows(&files);
    let results = predict_rows(&rows);
    let mut absent = Vec::new();
    for f in &files {
        let mine: Vec<_> = results
            .iter()
            .filter(|r| r.file == f.origin)
            .cloned()
            .collect();
        let report = markdown(std::slice::from_ref(f), &mine, GroupBy::Source);
        assert!(report.lines().filter(|l| l.starts_with("| ")).count() >= 2);
        absent.extend(
            missing(&report, &page)
                .into_iter()
                .map(|l| format!("{}: {l}", f.group)),
        );
    }
    let all = markdown(&files, &results, GroupBy::Source);
    let summary: String = all
        .lines()
        .filter(|l| !l.starts_with('|') && !l.starts_with("Not counted"))
        .map(|l| format!("{l}\n"))
        .collect();
    absent.extend(
        missing(&summary, &page)
            .into_iter()
            .map(|l| format!("all: {l}")),
    );
    assert!(
        absent.is_empty(),
        "docs/validation.md lacks {} line(s) `pplan validate --runs` prints now (regenerate the page's tables):\n{}",
        absent.len(),
        absent.join("\n")
    );
}
