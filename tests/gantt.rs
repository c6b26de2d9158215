//! Gantt rendering through the public API: legend, PNG header, file dispatch by extension,
//! degenerate timelines, determinism, large charts aggregated, windows; `--gantt-window`
//! through the binary. No timing assertions.

mod common;
use common::pplan;
use pplan::report::gantt::{
    chart_size_px, render_png, render_svg, write_file, Aggregate, GanttError, GanttOptions,
    AUTO_WIDTH_MAX_PX,
};
use pplan::schedule::generators;
use pplan::schedule::ir::{Action, Schedule};
use pplan::sim::{simulate, Costs, SimOptions, Span, Stream, Timeline, UnitCosts};
use std::path::PathBuf;

fn timeline(schedule: &Schedule) -> Timeline {
    let costs = Costs::uniform(
        schedule.num_stages,
        schedule.num_devices(),
        UnitCosts {
            forward_ns: 1_000_000,
            backward_ns: 2_000_000,
            p2p_ns: 100_000,
            ..Default::default()
        },
    );
    simulate(schedule, &costs, SimOptions::default())
        .unwrap()
        .timeline
        .unwrap()
}

/// Checks the PNG signature and returns IHDR's (width, height).
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&png[12..16], b"IHDR", "first chunk is IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

/// A fresh path in the system temp directory, unique per test and process.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pplan-gantt-{}-{name}", std::process::id()))
}

#[test]
fn svg_has_title_axis_and_legend_entries() {
    let tl = timeline(&generators::one_f_one_b(4, 8));
    let opts = GanttOptions {
        title: "1F1B p=4 m=8".to_string(),
        ..GanttOptions::default()
    };
    let svg = render_svg(&tl, &opts).unwrap();
    assert!(svg.starts_with("<svg"));
    for text in [
        "1F1B p=4 m=8",
        "F forward",
        "B backward",
        "transfer",
        "idle (bubble)",
        "time (ms)",
        "device 0",
        "device 3",
    ] {
        assert!(svg.contains(text), "SVG lacks {text:?}");
    }
    // 1F1B has no split backward and one chunk: no I/W or chunk entries to explain.
    assert!(!svg.contains("I backward"));
    assert!(!svg.contains("chunk = stage"));
}

#[test]
fn interleaved_legend_explains_the_chunk_shading() {
    let tl = timeline(&generators::interleaved_1f1b(4, 8, 2));
    let svg = render_svg(&tl, &GanttOptions::default()).unwrap();
    assert!(svg.contains("chunk = stage / 4"));
    assert!(svg.contains("F forward, chunk 0 to 1"));
}

#[test]
fn png_decodes_to_the_announced_size() {
    let tl = timeline(&generators::one_f_one_b(4, 8));
    let opts = GanttOptions {
        width_px: 1200,
        ..GanttOptions::default()
    };
    let (w, h) = chart_size_px(&tl, &opts).unwrap();
    assert_eq!(w, 1200);
    let png = render_png(&tl, &opts).unwrap();
    assert_eq!(png_size(&png), (w, h));
    let svg = render_svg(&tl, &opts).unwrap();
    assert!(svg.contains(&format!("width=\"{w}\" height=\"{h}\"")));
}

#[test]
fn automatic_width_is_capped_for_large_pipelines() {
    let tl = timeline(&generators::one_f_one_b(8, 32));
    let png = render_png(&tl, &GanttOptions::default()).unwrap();
    let (w, _) = png_size(&png);
    assert!(w <= AUTO_WIDTH_MAX_PX, "width {w}");
    // ... and wide enough that the 1 ms boxes keep their labels (about 26 px each).
    assert!(w >= 2000, "width {w}");
}

#[test]
fn same_timeline_gives_byte_identical_output() {
    for schedule in [
        generators::one_f_one_b(4, 8),
        generators::interleaved_1f1b(4, 8, 2),
        generators::gpipe(3, 5),
    ] {
        let tl = timeline(&schedule);
        let opts = GanttOptions::default();
        assert_eq!(
            render_svg(&tl, &opts).unwrap(),
            render_svg(&tl.clone(), &opts).unwrap()
        );
        assert_eq!(
            render_png(&tl, &opts).unwrap(),
            render_png(&tl.clone(), &opts).unwrap()
        );
    }
}

#[test]
fn write_file_chooses_the_format_by_extension() {
    let tl = timeline(&generators::gpipe(2, 3));
    let opts = GanttOptions::default();

    let svg_path = temp_path("chart.svg");
    write_file(&tl, &opts, &svg_path).unwrap();
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg"));
    std::fs::remove_file(&svg_path).unwrap();

    let png_path = temp_path("chart.PNG");
    write_file(&tl, &opts, &png_path).unwrap();
    let png = std::fs::read(&png_path).unwrap();
    assert_eq!(png_size(&png), chart_size_px(&tl, &opts).unwrap());
    std::fs::remove_file(&png_path).unwrap();
}

#[test]
fn wrong_extension_is_an_error_naming_path_and_valid_extensions() {
    let tl = timeline(&generators::gpipe(2, 3));
    for name in ["chart.jpg", "chart", "chart.svg.txt"] {
        let path = temp_path(name);
        let err = write_file(&tl, &GanttOptions::default(), &path).unwrap_err();
        assert!(matches!(err, GanttError::UnsupportedExtension { .. }));
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains(".svg") && msg.contains(".png"), "{msg}");
        assert!(!path.exists());
    }
}

#[test]
fn degenerate_timelines_render_without_panicking() {
    let span = |device, start_ns, end_ns| Span {
        device,
        stream: Stream::Compute,
        action: Action::f(device, 0),
        peer: None,
        start_ns,
        end_ns,
    };
    let cases = [
        Timeline::default(),
        Timeline {
            num_devices: 3,
            makespan_ns: 0,
            spans: Vec::new(),
        },
        Timeline {
            num_devices: 2,
            makespan_ns: 0,
            spans: vec![span(0, 0, 0), span(1, 0, 0)],
        },
        Timeline {
            num_devices: 1,
            makespan_ns: 5,
            spans: vec![span(0, 0, 5)],
        },
    ];
    for tl in &cases {
        for opts in [
            GanttOptions::default(),
            GanttOptions {
                title: String::new(),
                width_px: 1,
                show_transfers: false,
                show_summary: false,
                ..GanttOptions::default()
            },
        ] {
            let svg = render_svg(tl, &opts).unwrap();
            assert!(svg.starts_with("<svg"));
            let png = render_png(tl, &opts).unwrap();
            assert_eq!(png_size(&png), chart_size_px(tl, &opts).unwrap());
        }
    }
}

#[test]
fn malformed_inputs_are_errors_not_panics() {
    let tl = Timeline {
        num_devices: 1,
        makespan_ns: 10,
        spans: vec![Span {
            device: 4,
            stream: Stream::Send,
            action: Action::f(0, 0),
            peer: Some(1),
            start_ns: 0,
            end_ns: 10,
        }],
    };
    let err = render_svg(&tl, &GanttOptions::default()).unwrap_err();
    assert!(
        matches!(err, GanttError::SpanDeviceOutOfRange { device: 4, .. }),
        "{err}"
    );

    let mut reversed = tl.clone();
    reversed.spans[0].device = 0;
    reversed.spans[0].start_ns = 11;
    let err = render_png(&reversed, &GanttOptions::default()).unwrap_err();
    assert!(
        matches!(err, GanttError::SpanEndsBeforeStart { .. }),
        "{err}"
    );

    let tl_ok = timeline(&generators::gpipe(2, 2));
    for ns_per_unit in [0.0, -1.0, f64::NAN, f64::INFINITY, 5e-324] {
        let opts = GanttOptions {
            ns_per_unit,
            ..GanttOptions::default()
        };
        let err = render_svg(&tl_ok, &opts).unwrap_err();
        assert!(matches!(err, GanttError::InvalidOption { .. }), "{err}");
    }

    let huge = Timeline {
        num_devices: 100_000,
        makespan_ns: 1,
        spans: Vec::new(),
    };
    let err = render_png(&huge, &GanttOptions::default()).unwrap_err();
    assert!(matches!(err, GanttError::TooLarge { .. }), "{err}");
}

/// `(height, fill)` of every `<rect>` in an SVG written by plotters.
fn rects(svg: &str) -> Vec<(String, String)> {
    let attr = |tag: &str, name: &str| -> String {
        let key = format!(" {name}=\"");
        tag.find(&key)
            .map(|i| {
                let rest = &tag[i + key.len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_string()
            })
            .unwrap_or_default()
    };
    svg.split("<rect")
        .skip(1)
        .map(|t| {
            let tag = &t[..t.find('>').unwrap_or(t.len())];
            (attr(tag, "height"), attr(tag, "fill"))
        })
        .collect()
}

/// The contents of every `<text>` element.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').map_or(0, |i| i + 1)..];
            body[..body.find("</text>").unwrap_or(body.len())]
                .trim()
                .to_string()
        })
        .collect()
}

/// Issue 17's acceptance case: a 32-stage, 256-micro-batch chart is aggregated (no per-box
/// micro-batch numbers), has the bubble legend (overall and per device) and stays a sensible
/// size, in SVG and PNG.
#[test]
fn large_chart_32_stages_256_microbatches_is_aggregated_with_bubble_legend() {
    let tl = timeline(&generators::one_f_one_b(32, 256));
    let opts = GanttOptions::default();
    let svg = render_svg(&tl, &opts).unwrap();
    let texts = texts(&svg);
    let compute = tl
        .spans
        .iter()
        .filter(|s| s.stream == Stream::Compute)
        .count();
    assert_eq!(compute, 2 * 32 * 256);
    // Titles, row and lane labels, ticks, legend and one bubble figure per device: far fewer
    // texts than boxes, and none of them a micro-batch number inside a box.
    assert!(texts.len() < 32 * 5 + 60, "{} texts", texts.len());
    assert!(!svg.contains("number in box"));
    let overall = texts
        .iter()
        .find(|t| t.starts_with("idle (bubble): ") && t.contains("% overall"))
        .unwrap_or_else(|| panic!("no overall bubble in the legend: {texts:?}"));
    let percent: Vec<&String> = texts
        .iter()
        .filter(|t| t.ends_with('%') && !t.contains(' '))
        .collect();
    assert_eq!(
        percent.len(),
        32,
        "one bubble figure per device: {percent:?}"
    );
    // The timeline's own bubble: idle / (devices x makespan) on the compute lanes.
    let busy: u64 = tl
        .spans
        .iter()
        .filter(|s| s.stream == Stream::Compute)
        .map(|s| s.end_ns - s.start_ns)
        .sum();
    let bubble = (1.0 - busy as f64 / (32.0 * tl.makespan_ns as f64)) * 100.0;
    assert!(
        overall.contains(&format!("{bubble:.1}% overall")),
        "{overall}"
    );
    assert!(percent.iter().all(|t| **t == format!("{bubble:.1}%")));
    // Merged runs: fewer rectangles than compute boxes (steady-state F/B alternate, so not
    // by much), each a kind colour, no chunk shades.
    let fills: std::collections::BTreeSet<String> = rects(&svg)
        .into_iter()
        .filter(|(h, _)| h == "25")
        .map(|(_, f)| f)
        .collect();
    assert!(fills.is_subset(&["#0072B2", "#E69F00", "#FAD4D4"].map(String::from).into()));
    let (w, h) = chart_size_px(&tl, &opts).unwrap();
    assert!(w <= AUTO_WIDTH_MAX_PX && h <= 2_500, "{w} x {h}");
    let png = render_png(&tl, &opts).unwrap();
    assert_eq!(png_size(&png), (w, h));
    // Aggregation can be turned off: then every box is drawn with its outline.
    let never = render_svg(
        &tl,
        &GanttOptions {
            aggregate: Aggregate::Never,
            ..GanttOptions::default()
        },
    )
    .unwrap();
    assert!(never.contains("number in box"));
    assert!(!never.contains("% overall"));
}

/// Large aggregated pipelines get compact rows so that the image stays within bounds.
#[test]
fn aggregated_charts_of_many_devices_use_compact_rows() {
    let tl = timeline(&generators::one_f_one_b(128, 256));
    let (w, h) = chart_size_px(&tl, &GanttOptions::default()).unwrap();
    // 29 px per device instead of 60.
    assert!(w <= AUTO_WIDTH_MAX_PX && h <= 128 * 30 + 300, "{w} x {h}");
}

/// A window draws exactly the actions overlapping it, and its axis starts at the window.
#[test]
fn window_draws_only_the_actions_overlapping_it() {
    let tl = timeline(&generators::one_f_one_b(4, 8));
    let (a, b) = (5_000_000u64, 9_000_000u64);
    let opts = GanttOptions {
        window_ns: Some((a, b)),
        aggregate: Aggregate::Never,
        ..GanttOptions::default()
    };
    let svg = render_svg(&tl, &opts).unwrap();
    let boxes = rects(&svg)
        .into_iter()
        .filter(|(h, f)| h == "25" && (f == "#0072B2" || f == "#E69F00"))
        .count();
    let overlapping = tl
        .spans
        .iter()
        .filter(|s| s.stream == Stream::Compute && s.start_ns < b && s.end_ns > a)
        .count();
    let all = tl
        .spans
        .iter()
        .filter(|s| s.stream == Stream::Compute)
        .count();
    assert!(
        overlapping > 0 && overlapping < all,
        "{overlapping} of {all}"
    );
    assert_eq!(boxes, overlapping);
    let texts = texts(&svg);
    assert!(
        texts.iter().any(|t| t.contains("window 5.000 to 9.000 ms")),
        "{texts:?}"
    );
    assert!(texts.contains(&"5.0".to_string()) && texts.contains(&"9.0".to_string()));
    assert!(
        !texts.contains(&"0.0".to_string()),
        "the axis starts at the window"
    );
    // An empty or reversed window is an error naming the option.
    for w in [(b, a), (a, a)] {
        let e = render_svg(
            &tl,
            &GanttOptions {
                window_ns: Some(w),
                ..GanttOptions::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("window_ns"), "{e}");
    }
}

/// `--gantt-window START:END` on simulate and predict: drawn when valid; exit 2 naming the flag
/// for END <= START, non-numbers and negatives; only with --gantt.
#[test]
fn gantt_window_flag_on_simulate_and_predict() {
    let svg = temp_path("window.svg");
    let svg_s = svg.to_str().unwrap();
    let sim = [
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--gantt",
        svg_s,
    ];
    let mut args = sim.to_vec();
    args.extend(["--gantt-window", "5:9"]);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("window 5.000 to 9.000 ms"));
    let (_, plain, _) = pplan(&sim);
    assert_eq!(out, plain, "stdout does not depend on the window");
    let predict = [
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "8",
        "--tp",
        "1",
        "--pp",
        "4",
        "--global-batch",
        "16",
        "--micro-batch",
        "1",
        "--gantt",
        svg_s,
    ];
    let mut args = predict.to_vec();
    args.extend(["--gantt-window", "10:60"]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("window 0.010 to 0.060 s"));
    for bad in ["9:5", "5:5", "a:9", "5:x", "5", "-1:3", "1:inf", ":"] {
        for base in [&sim[..], &predict[..]] {
            let mut args = base.to_vec();
            args.extend(["--gantt-window", bad]);
            let (code, _, err) = pplan(&args);
            assert_eq!(code, 2, "{bad}: {err}");
            assert!(err.contains("--gantt-window"), "{bad}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    // Without --gantt there is nothing to window.
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--gantt-window",
        "0:5",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--gantt"), "{err}");
}
