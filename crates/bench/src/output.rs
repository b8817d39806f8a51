//! Writing a run's or a comparison's directory: the files of [`crate::results`] and
//! [`crate::compare`], the plots and the HTML pages. Kept apart so that the results and the
//! comparison do not depend on the page that shows them (the page reads both).

use std::path::{Path, PathBuf};

use crate::compare::{Run, text};
use crate::results::{
    ResultFile, ResultsError, create_dir, hgrm, latencies_csv, summary_csv, write_file, write_json,
};
use crate::runner::RunResult;

/// Writes a run's results directory (created if missing); returns the files written.
pub fn write_run_dir(dir: &Path, file: &ResultFile) -> Result<Vec<PathBuf>, ResultsError> {
    create_dir(dir)?;
    let result = &file.result;
    let mut written = vec![
        write_file(dir, "summary.txt", &crate::report::summary_text(result))?,
        write_file(dir, "summary.csv", &summary_csv(result))?,
    ];
    for (op, stats) in result.histograms.iter() {
        written.push(write_file(
            dir,
            &format!("{op}_latencies.csv"),
            &latencies_csv(result, op),
        )?);
        written.push(write_file(
            dir,
            &format!("{op}.hgrm"),
            &hgrm(stats.histogram()),
        )?);
    }
    written.push(write_json(dir, "result.json", file)?);
    let throughput = crate::plot::throughput(std::slice::from_ref(&("", result)));
    let latency = crate::plot::latency(std::slice::from_ref(&("", result)));
    written.push(write_file(dir, "throughput.svg", &throughput)?);
    written.push(write_file(dir, "latency.svg", &latency)?);
    written.push(write_file(
        dir,
        "report.html",
        &crate::html::run_report(file, &throughput, &latency),
    )?);
    Ok(written)
}

/// Writes `compare.html`, `compare-throughput.svg`, `compare-latency.svg` and
/// `compare.txt` into `dir` (created if missing); returns the files written.
pub fn write_compare_dir(dir: &Path, runs: &[Run]) -> Result<Vec<PathBuf>, ResultsError> {
    create_dir(dir)?;
    let labelled: Vec<(String, &RunResult)> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("[{}]", i + 1), &r.file.result))
        .collect();
    let labelled: Vec<(&str, &RunResult)> =
        labelled.iter().map(|(l, r)| (l.as_str(), *r)).collect();
    let throughput = crate::plot::throughput(&labelled);
    let latency = crate::plot::latency(&labelled);
    Ok(vec![
        write_file(dir, "compare.txt", &text(runs))?,
        write_file(dir, "compare-throughput.svg", &throughput)?,
        write_file(dir, "compare-latency.svg", &latency)?,
        write_file(
            dir,
            "compare.html",
            &crate::html::compare_report(runs, &throughput, &latency),
        )?,
    ])
}
