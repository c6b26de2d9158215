//! Gantt rendering through the public API: legend, PNG header, file dispatch by extension,
//! degenerate timelines, determinism. No timing assertions.

use pplan::report::gantt::{
    chart_size_px, render_png, render_svg, write_file, GanttError, GanttOptions, AUTO_WIDTH_MAX_PX,
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
