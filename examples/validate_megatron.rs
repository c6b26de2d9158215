//! Predicted vs published throughput for Narayanan et al. 2021 Table 1 on `a100-80gb`.
//!
//! `cargo run --release --example validate_megatron [-- --svg docs/validation.svg]`
//! prints the Markdown table used in docs/validation.md and, with `--svg`, draws the plot.

use plotters::prelude::*;
use pplan::inputs::hardware::Hardware;
use pplan::report::validation::{validate_megatron, Comparison};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let svg = args
        .iter()
        .position(|a| a == "--svg")
        .and_then(|i| args.get(i + 1).cloned());
    let hw = Hardware::bundled("a100-80gb").expect("bundled profile");
    let rows = match validate_megatron(&hw) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    println!("| row | model | t | p | d | B | b | v | published TFLOP/s | predicted TFLOP/s | error | bubble | peak memory (GB) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for c in &rows {
        let p = &c.prediction;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:+.1}% | {:.3} | {:.1} |",
            c.row.id,
            c.model,
            c.row.t,
            c.row.p,
            c.row.d,
            c.row.global_batch,
            p.micro_batch,
            p.chunks,
            c.row.tflops_per_gpu,
            p.tflops_per_gpu,
            100.0 * c.error,
            p.bubble_fraction,
            p.peak_memory_bytes as f64 / 1e9
        );
    }
    let mae = rows.iter().map(|c| c.error.abs()).sum::<f64>() / rows.len() as f64;
    let worst = rows
        .iter()
        .max_by(|a, b| a.error.abs().total_cmp(&b.error.abs()))
        .expect("rows");
    println!();
    println!(
        "mean absolute error {:.2}%, worst {} {:+.2}%",
        100.0 * mae,
        worst.row.id,
        100.0 * worst.error
    );
    if let Some(path) = svg {
        if let Err(e) = plot(&rows, &path) {
            eprintln!("error: cannot draw {path}: {e}");
            std::process::exit(1);
        }
        eprintln!("wrote {path}");
    }
}

/// DejaVu Sans, bundled in assets/fonts (Bitstream Vera license), so no system fonts are needed.
static FONT_TTF: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");

fn plot(rows: &[Comparison], path: &str) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT_TTF)
        .map_err(|_| "cannot register the embedded font")?;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Megatron-LM 2021 Table 1 on a100-80gb: TFLOP/s per GPU",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(56)
        .build_cartesian_2d((1.0f64..1200.0f64).log_scale(), 100.0f64..200.0f64)?;
    chart
        .configure_mesh()
        .x_desc("model size (billion parameters)")
        .y_desc("TFLOP/s per GPU")
        .draw()?;
    let published: Vec<(f64, f64)> = rows
        .iter()
        .map(|c| (c.row.params_b, c.row.tflops_per_gpu))
        .collect();
    let predicted: Vec<(f64, f64)> = rows
        .iter()
        .map(|c| (c.row.params_b, c.prediction.tflops_per_gpu))
        .collect();
    chart
        .draw_series(std::iter::once(PathElement::new(published.clone(), BLUE)))?
        .label("published")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart.draw_series(published.iter().map(|&p| Circle::new(p, 4, BLUE.filled())))?;
    chart
        .draw_series(std::iter::once(PathElement::new(predicted.clone(), RED)))?
        .label("pplan predict (best b, v)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart.draw_series(
        predicted
            .iter()
            .map(|&p| TriangleMarker::new(p, 5, RED.filled())),
    )?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}
