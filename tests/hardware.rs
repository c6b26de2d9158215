//! Bundled hardware profiles: every one loads, every number has its source and unit, the
//! datasheet figures are the ones the sources quote, and the NVLink domain decides which
//! collectives and transfers stay on NVLink.

mod common;
use common::{json, pplan};

use pplan::cost::network::{ranks_per_nvlink_domain, tp_on_nvlink};
use pplan::cost::{all_gather_s, all_reduce_s, CostModel, Layout, Stack};
use pplan::inputs::hardware::{valid_names, Hardware, HardwareError, Precision, BUNDLED};
use pplan::inputs::profile::LayerProfile;
use pplan::inputs::Model;
use pplan::plan::profiled::stage_costs;

const ALL: [&str; 9] = [
    "a100-80gb",
    "h100-80gb",
    "h100-96gb-500w",
    "h200",
    "h800",
    "b200",
    "b300",
    "gb200-nvl72",
    "gb300-nvl72",
];

fn hw(name: &str) -> Hardware {
    Hardware::bundled(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_bundled_profile_loads_under_its_name() {
    assert_eq!(valid_names(), ALL.to_vec());
    for name in ALL {
        let h = hw(name);
        assert_eq!(h.name, name);
        assert_eq!(Hardware::load(name).unwrap(), h);
        // The file on disk is the one compiled in.
        let path = format!("{}/hardware/{name}.json", env!("CARGO_MANIFEST_DIR"));
        assert_eq!(Hardware::load(&path).unwrap(), h, "{path}");
    }
}

/// Every number under gpu, node and network has a non-empty source that gives its unit.
#[test]
fn every_number_has_a_source_with_its_unit() {
    const UNITS: [&str; 8] = [
        "(FLOP/s",
        "(W)",
        "(bytes",
        "(count",
        "(dimensionless",
        "(s)",
        "(elements",
        "(ratio",
    ];
    for (name, text) in BUNDLED {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        let sources = v["sources"].as_object().unwrap();
        let mut numbers = 0;
        for part in ["gpu", "node", "network"] {
            for (key, value) in v[part].as_object().unwrap() {
                if !value.is_number() {
                    continue;
                }
                numbers += 1;
                let field = format!("{part}.{key}");
                let source = sources
                    .get(&field)
                    .and_then(|s| s.as_str())
                    .unwrap_or_else(|| panic!("{name}: {field} has no source"));
                assert!(!source.trim().is_empty(), "{name}: {field}");
                let unit =
                    field == "network.oversubscription" || UNITS.iter().any(|u| source.contains(u));
                assert!(unit, "{name}: {field}: no unit in '{source}'");
            }
        }
        assert!(numbers >= 16, "{name}: {numbers} numbers");
        for f in v["fitted"].as_array().unwrap() {
            let f = f.as_str().unwrap();
            assert!(
                sources[f].as_str().unwrap().contains("FITTED"),
                "{name}: {f}"
            );
        }
    }
}

/// Dense tensor-core peaks, HBM and links, as the cited datasheets give them; memory as
/// nvidia-smi reports it on the part (measured on H100 and H200, published for B200 and GB200;
/// the datasheets' GB are GiB less what the driver keeps).
#[test]
fn datasheet_figures() {
    // (name, BF16, FP8, FP4 dense FLOP/s, HBM bytes, HBM B/s, NVLink B/s per direction,
    //  NVLink domain, GPUs per node, NIC B/s per direction per GPU)
    type Row = (&'static str, f64, f64, f64, u64, f64, f64, u32, u32, f64);
    let rows: [Row; 8] = [
        (
            "a100-80gb",
            312e12,
            0.0,
            0.0,
            80 << 30,
            2039e9,
            300e9,
            8,
            8,
            25e9,
        ),
        (
            "h100-80gb",
            989.4e12,
            1978.9e12,
            0.0,
            81559 << 20,
            3.35e12,
            450e9,
            8,
            8,
            50e9,
        ),
        (
            "h200",
            989.4e12,
            1978.9e12,
            0.0,
            143771 << 20,
            4.8e12,
            450e9,
            8,
            8,
            50e9,
        ),
        (
            "h800",
            989.4e12,
            1978.9e12,
            0.0,
            81559 << 20,
            3.35e12,
            200e9,
            8,
            8,
            50e9,
        ),
        (
            "b200",
            2.25e15,
            4.5e15,
            9e15,
            183359 << 20,
            8e12,
            900e9,
            8,
            8,
            50e9,
        ),
        (
            "b300",
            2.25e15,
            4.5e15,
            13.5e15,
            270_000_000_000,
            8e12,
            900e9,
            8,
            8,
            100e9,
        ),
        (
            "gb200-nvl72",
            2.5e15,
            5e15,
            10e15,
            189471 << 20,
            8e12,
            900e9,
            72,
            4,
            50e9,
        ),
        (
            "gb300-nvl72",
            2.5e15,
            5e15,
            15e15,
            279_000_000_000,
            8e12,
            900e9,
            72,
            4,
            100e9,
        ),
    ];
    for (name, bf16, fp8, fp4, mem, hbm, nvlink, domain, gpn, nic) in rows {
        let h = hw(name);
        let g = &h.gpu;
        assert_eq!(g.peak_flops_per_s, bf16, "{name} bf16");
        assert_eq!(g.peak_fp8_flops_per_s, fp8, "{name} fp8");
        assert_eq!(g.peak_fp4_flops_per_s, fp4, "{name} fp4");
        assert_eq!(g.memory_bytes, mem, "{name} memory");
        assert_eq!(g.hbm_bandwidth_bytes_per_s, hbm, "{name} hbm");
        assert_eq!(h.node.nvlink_bandwidth_bytes_per_s, nvlink, "{name} nvlink");
        assert_eq!(h.nvlink_domain_gpus(), domain, "{name} domain");
        assert_eq!(h.node.gpus_per_node, gpn, "{name} gpus per node");
        // One NIC per GPU on every profile.
        assert_eq!(h.node.nics_per_node, gpn, "{name} nics");
        assert_eq!(h.node.nic_bandwidth_bytes_per_s, nic, "{name} nic");
        // Sparse datasheet figures are twice these; FP8 is twice BF16 wherever it exists.
        if fp8 > 0.0 {
            assert!((fp8 / bf16 - 2.0).abs() < 1e-3, "{name}");
        }
    }
    // NVLink 5 is 1.8 TB/s bidirectional per GPU; NVLink 4 900 GB/s; H800 400 GB/s.
    assert_eq!(
        hw("gb200-nvl72").node.nvlink_bandwidth_bytes_per_s * 2.0,
        1.8e12
    );
    assert_eq!(
        hw("h100-80gb").node.nvlink_bandwidth_bytes_per_s * 2.0,
        900e9
    );
    assert_eq!(hw("h800").node.nvlink_bandwidth_bytes_per_s * 2.0, 400e9);
    // An NVL72 rack is 18 trays of 4 GPUs.
    let rack = hw("gb300-nvl72");
    assert_eq!(rack.nvlink_domain_gpus() / rack.node.gpus_per_node, 18);
}

#[test]
fn precisions_each_gpu_has() {
    use Precision::*;
    for (name, valid) in [
        ("a100-80gb", vec![Bf16]),
        ("h100-80gb", vec![Bf16, Fp8]),
        ("h200", vec![Bf16, Fp8]),
        ("h800", vec![Bf16, Fp8]),
        ("b200", vec![Bf16, Fp8, Mxfp8, Nvfp4]),
        ("b300", vec![Bf16, Fp8, Mxfp8, Nvfp4]),
        ("gb200-nvl72", vec![Bf16, Fp8, Mxfp8, Nvfp4]),
        ("gb300-nvl72", vec![Bf16, Fp8, Mxfp8, Nvfp4]),
    ] {
        let h = hw(name);
        assert_eq!(h.precisions(), valid, "{name}");
        for p in Precision::ALL {
            let got = h.peak_flops_per_s_for(p);
            assert_eq!(got.is_ok(), valid.contains(&p), "{name} {p}");
        }
    }
    let b200 = hw("b200");
    assert_eq!(b200.peak_flops_per_s_for(Bf16), Ok(2.25e15));
    assert_eq!(b200.peak_flops_per_s_for(Fp8), Ok(4.5e15));
    assert_eq!(b200.peak_flops_per_s_for(Mxfp8), Ok(4.5e15));
    assert_eq!(b200.peak_flops_per_s_for(Nvfp4), Ok(9e15));
    let e = hw("h100-80gb").peak_flops_per_s_for(Nvfp4).unwrap_err();
    assert_eq!(
        e.to_string(),
        "h100-80gb has no FP4 tensor cores; valid: bf16, fp8"
    );
    assert!(matches!(e, HardwareError::Unsupported { .. }));
}

fn cost_model<'a>(model: &'a Model, hw: &'a Hardware, tp: u64, pp: u64, dp: u64) -> CostModel<'a> {
    CostModel {
        model,
        hw,
        layout: Layout {
            pp,
            dp,
            ..Layout::tensor_parallel(tp)
        },
        stack: Stack::default(),
    }
}

/// A TP group of 16 or 72 stays on NVLink in a GB200 NVL72 rack; on DGX H100 a group of 16
/// spans two nodes and its ring runs over the NICs.
#[test]
fn tensor_parallel_16_and_72_stay_on_nvlink_in_an_nvl72_rack() {
    let model = Model::preset("gpt3-175b").unwrap();
    let bytes = 2.0 * model.seq_len as f64 * model.hidden_size as f64;
    let nvl72 = hw("gb200-nvl72");
    let h100 = hw("h100-80gb");
    let over =
        |h: &Hardware, t: u64| -> f64 { cost_model(&model, h, t, 1, 1).layer().forward.tp_comm_s };
    let nvlink = |h: &Hardware, t: u64| {
        2.0 * all_reduce_s(bytes, t, h.nvlink_bytes_per_s(), h.node.nvlink_latency_s)
    };
    let nics = |h: &Hardware, t: u64| {
        2.0 * all_reduce_s(
            bytes,
            t,
            h.nic_bytes_per_s_per_gpu(true),
            h.node.nic_latency_s,
        )
    };
    for t in [4, 8, 16, 72] {
        assert!(tp_on_nvlink(&nvl72, t), "t = {t}");
        assert_eq!(over(&nvl72, t), nvlink(&nvl72, t), "t = {t}");
    }
    assert!(tp_on_nvlink(&h100, 8) && !tp_on_nvlink(&h100, 16));
    assert_eq!(over(&h100, 8), nvlink(&h100, 8));
    assert_eq!(over(&h100, 16), nics(&h100, 16));
    // 900 GB/s NVLink against one 400 Gb/s NIC per GPU.
    assert!(over(&h100, 16) > 5.0 * over(&nvl72, 16));
    // Beyond the rack the ring leaves NVLink.
    assert!(!tp_on_nvlink(&nvl72, 144));
    assert_eq!(over(&nvl72, 144), nics(&nvl72, 144));
    // t = 16 does not tile 72 GPUs: four groups per rack, two trays idle.
    assert_eq!(ranks_per_nvlink_domain(&nvl72, 16), 64);
    assert_eq!(ranks_per_nvlink_domain(&nvl72, 8), 72);
}

/// Pipeline transfers between trays of one rack use NVLink; between racks the NICs.
#[test]
fn pipeline_transfers_cross_trays_on_nvlink() {
    let model = Model::preset("gpt3-175b").unwrap();
    let nvl72 = hw("gb200-nvl72");
    let h100 = hw("h100-80gb");
    let bytes = 2.0 * model.seq_len as f64 * model.hidden_size as f64;
    // t = 4, d = 2: a pipeline stage is 8 ranks = 2 trays; stages 0..8 fill the rack.
    let cm = cost_model(&model, &nvl72, 4, 18, 2);
    let on_nvlink = bytes / nvl72.nvlink_bytes_per_s() + nvl72.node.nvlink_latency_s;
    for p in 0..8 {
        assert_eq!(cm.p2p_s(p, p + 1), on_nvlink, "stage {p}");
    }
    // Stage 9 starts at rank 72: the next rack.
    assert!(cm.p2p_s(8, 9) > on_nvlink);
    // On DGX H100 every stage (8 ranks) is its own node: every transfer crosses the NICs.
    let cm = cost_model(&model, &h100, 4, 18, 2);
    let h100_nvlink = bytes / h100.nvlink_bytes_per_s() + h100.node.nvlink_latency_s;
    assert!(cm.p2p_s(0, 1) > h100_nvlink);
    assert_eq!(
        cm.p2p_bytes_s(0, 1, 1e6),
        1e6 / h100.nic_bytes_per_s_per_gpu(false) + h100.node.nic_latency_s
    );
}

/// The data-parallel reduction counts its members per NVLink domain, not per node.
#[test]
fn data_parallel_reduction_stays_in_the_rack() {
    let model = Model::preset("gpt3-175b").unwrap();
    let params = 1e9;
    let bytes = params * Stack::default().grad_reduce_bytes_per_param;
    // t = 4, d = 18: the whole group is one rack; reduce-scatter + all-gather over NVLink only.
    let nvl72 = hw("gb200-nvl72");
    let cm = cost_model(&model, &nvl72, 4, 1, 18);
    let nvl = nvl72.nvlink_bytes_per_s();
    let lat = nvl72.node.nvlink_latency_s;
    assert_eq!(
        cm.grad_reduce_s(params),
        2.0 * all_gather_s(bytes, 18, nvl, lat)
    );
    // The same group on DGX H100: 2 members per node, 9 nodes over the NICs.
    let h100 = hw("h100-80gb");
    let cm = cost_model(&model, &h100, 4, 1, 18);
    let intra = 2.0
        * all_gather_s(
            bytes,
            2,
            h100.nvlink_bytes_per_s(),
            h100.node.nvlink_latency_s,
        );
    let inter = all_reduce_s(
        bytes / 2.0,
        9,
        h100.nic_bytes_per_s_per_gpu(false),
        h100.node.nic_latency_s,
    );
    assert_eq!(cm.grad_reduce_s(params), intra + inter);
}

/// With a layer profile, transfers between devices of one NVL72 rack take NVLink.
#[test]
fn profiled_transfers_use_the_nvlink_domain() {
    let text = std::fs::read_to_string(format!(
        "{}/examples/profiles/uneven-12.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let profile = LayerProfile::from_json(&text, "uneven-12.json").unwrap();
    let boundaries: Vec<u32> = (0..12).collect();
    let rack = hw("gb200-nvl72");
    let mut trays = rack.clone();
    trays.node.nvlink_domain_gpus = None;
    let on_rack = stage_costs(&profile, &boundaries, 12, |s| s, Some(&rack));
    let on_trays = stage_costs(&profile, &boundaries, 12, |s| s, Some(&trays));
    for s in 0..11 {
        let crosses_tray = s % 4 == 3;
        assert_eq!(
            on_rack.send_forward_ns[s] < on_trays.send_forward_ns[s],
            crosses_tray,
            "stage {s}"
        );
    }
}

#[test]
fn predict_on_b200_from_the_cli() {
    let (code, out, err) = pplan(&[
        "predict",
        "--model",
        "llama3-70b",
        "--hardware",
        "b200",
        "--gpus",
        "64",
        "--tp",
        "8",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["hardware"], "b200");
    assert_eq!(v["memory_limit_bytes"], 183_359u64 << 20);
    assert!(v["step_time_s"].as_f64().unwrap() > 0.0, "{out}");
    assert_eq!(v["fits"], true, "{out}");
}

#[test]
fn tp_16_on_an_nvl72_rack_beats_dgx_h100_from_the_cli() {
    let run = |hardware: &str| {
        let (code, out, err) = pplan(&[
            "predict",
            "--model",
            "gpt3-175b",
            "--hardware",
            hardware,
            "--gpus",
            "128",
            "--tp",
            "16",
            "--pp",
            "8",
            "--global-batch",
            "128",
            "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{hardware}: {err}");
        json(&out)
    };
    let rack = run("gb200-nvl72");
    let dgx = run("h100-80gb");
    assert!(
        rack["step_time_s"].as_f64().unwrap() < dgx["step_time_s"].as_f64().unwrap(),
        "{rack} {dgx}"
    );
}

#[test]
fn search_on_an_nvl72_rack_tries_tensor_parallel_beyond_a_tray() {
    let (code, out, err) = pplan(&[
        "search",
        "--model",
        "gpt3-175b",
        "--hardware",
        "gb200-nvl72",
        "--gpus",
        "144",
        "--global-batch",
        "144",
        "--top",
        "20",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let rejected = v["rejected"].as_array().unwrap();
    let tp = rejected
        .iter()
        .find(|r| r["reason"] == "tp_across_nodes")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        tp["constraint"],
        "t must divide the 72 GPUs of an NVLink domain (pin --tp to go across domains)"
    );
    // Groups wider than a 4-GPU tray (t = 6 here) are searched and rank among the best (14th of
    // some 174,000 feasible candidates, 5 % behind the best, t = 2 with ZeRO-3).
    let results = v["results"].as_array().unwrap();
    assert!(
        results.iter().any(|r| r["tp"].as_u64().unwrap() > 4),
        "{out}"
    );
}

#[test]
fn unknown_hardware_lists_every_bundled_name() {
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "gpt-1.7b",
        "--hardware",
        "tpu-v9",
        "--gpus",
        "8",
        "--global-batch",
        "8",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains(&ALL.join(", ")), "{err}");
}

/// `pplan predict` of a small model on a user profile: the second bundled one with `edit`
/// applied, written to `file` in a folder of the test's own (exit code, stderr).
fn predict_on_edited_profile(file: &str, edit: impl Fn(&mut serde_json::Value)) -> (i32, String) {
    let mut v: serde_json::Value = serde_json::from_str(BUNDLED[1].1).unwrap();
    edit(&mut v);
    let dir = std::env::temp_dir().join(format!("pplan-hw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, v.to_string()).unwrap();
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "gpt-1.7b",
        "--hardware",
        path.to_str().unwrap(),
        "--gpus",
        "8",
        "--global-batch",
        "8",
    ]);
    (code, err)
}

#[test]
fn a_bad_domain_in_a_user_profile_names_the_file_and_the_field() {
    let (code, err) = predict_on_edited_profile("my-cluster.json", |v| {
        v["node"]["nvlink_domain_gpus"] = serde_json::json!(20)
    });
    assert_eq!(code, 2);
    assert!(
        err.contains("my-cluster.json")
            && err.contains("node.nvlink_domain_gpus")
            && err.contains("multiple of node.gpus_per_node (8)"),
        "{err}"
    );
}

/// A gap between kernels outside 0-1 s exits 2 naming the file, the field and the valid range.
#[test]
fn a_bad_kernel_gap_names_the_field_and_the_range() {
    for (file, bad) in [("gap-negative.json", -1e-6), ("gap-two.json", 2.0)] {
        let (code, err) =
            predict_on_edited_profile(file, |v| v["gpu"]["kernel_gap_s"] = serde_json::json!(bad));
        assert_eq!(code, 2, "{bad}");
        assert!(
            err.contains(file) && err.contains("gpu.kernel_gap_s") && err.contains("from 0 to 1"),
            "{err}"
        );
    }
}

/// Blackwell's FP8 GEMMs take every operand layout (Transformer Engine's
/// `is_non_tn_fp8_gemm_supported`), so per-tensor FP8 keeps one cast of a weight and writes
/// one cast of an activation where Hopper keeps the cast and its transpose; MXFP8 keeps its
/// row- and column-wise casts on both. Per parameter: 1 extra weight byte on Blackwell, 2 on
/// Hopper; per cast element: 3 bytes of traffic (read 2, write 1) against 4.
#[test]
fn fp8_without_transposes_on_blackwell() {
    let m = Model::preset("llama3-70b").unwrap();
    for name in [
        "b200",
        "b300",
        "gb200-nvl72",
        "gb300-nvl72",
        "h100-80gb",
        "h200",
        "h800",
    ] {
        let gpu = hw(name);
        let blackwell = !name.starts_with('h');
        assert_eq!(gpu.gpu.fp8_any_layout, blackwell, "{name}");
        let stack = |precision| Stack {
            precision,
            ..Stack::default()
        };
        let fp8 = stack(Precision::Fp8);
        let mx = stack(Precision::Mxfp8);
        assert_eq!(
            fp8.low_precision_copy_bytes(&gpu),
            if blackwell { 1 } else { 2 },
            "{name}"
        );
        assert_eq!(
            fp8.state_bytes(&gpu).extra_weight,
            fp8.low_precision_copy_bytes(&gpu)
        );
        assert_eq!(mx.low_precision_copy_bytes(&gpu), 2, "{name}");
        let cast = |stack: Stack| {
            CostModel {
                model: &m,
                hw: &gpu,
                layout: Layout::tensor_parallel(4),
                stack,
            }
            .low_precision_cast_bytes()
        };
        let (f8, m8) = (cast(fp8), cast(mx));
        let ratio = if blackwell { 0.75 } else { 1.0 };
        assert!((f8.0 / m8.0 - ratio).abs() < 1e-12, "{name}: {f8:?} {m8:?}");
        assert!((f8.1 / m8.1 - ratio).abs() < 1e-12, "{name}: {f8:?} {m8:?}");
    }
}

/// The Blackwell profiles' GEMM half dimension is the measured H100 one (128) scaled by the
/// ratio of B200's to H100's in XLA's measured GEMM table (hardware/published/xla/): the
/// least-squares fit of `max * prod d/(d + d0)` to the BF16 GEMMs with every dimension at
/// least 2048, as `scripts/fit_gemm_half_dim.py` does it.
#[test]
fn blackwell_gemm_half_dim_is_scaled_from_xlas_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hardware/published/xla/default_matmul_perf_table.csv");
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    assert_eq!(lines.next(), Some("gpu,b,m,n,k,dtype,flops_per_s"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let fit = |gpu: &str, peak: f64| -> (u32, f64) {
        let pts: Vec<([f64; 3], f64)> = rows
            .iter()
            .filter(|r| r[0] == gpu && r[5] == "bf16xbf16->bf16")
            .filter_map(|r| {
                let v: Vec<f64> = r[1..5].iter().map(|x| x.parse().unwrap()).collect();
                // b, m, n, k: every dimension of one GEMM at least 2048; the batch fills m.
                (v[1..].iter().all(|&d| d >= 2048.0)).then(|| {
                    (
                        [v[0] * v[1], v[2], v[3]],
                        r[6].parse::<f64>().unwrap() / peak,
                    )
                })
            })
            .collect();
        let sse_of = |d0: f64| {
            let logs: Vec<f64> = pts
                .iter()
                .map(|(d, e)| e.ln() - d.iter().map(|x| (x / (x + d0)).ln()).sum::<f64>())
                .collect();
            let mean = logs.iter().sum::<f64>() / logs.len() as f64;
            (
                logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>(),
                mean.exp(),
            )
        };
        let best = (1..=256)
            .map(|i| (i * 8, sse_of(f64::from(i * 8))))
            .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
            .unwrap();
        (best.0, best.1 .1)
    };
    let (h100, _) = fit("sm_90", 989.4e12);
    let (b200, _) = fit("sm_100_B200", 2250e12);
    assert_eq!((h100, b200), (200, 536), "XLA's table fits differently");
    let scaled = 128.0 * f64::from(b200) / f64::from(h100);
    assert_eq!(hw("h100-80gb").gpu.gemm_half_dim, 128.0);
    for name in ["b200", "gb200-nvl72", "b300", "gb300-nvl72"] {
        let d0 = hw(name).gpu.gemm_half_dim;
        assert!((d0 - scaled).abs() < 0.5, "{name}: {d0}, scaled {scaled}");
    }
}

/// A softmax floor that is no head dimension exits 2 naming the file, the field and the range.
#[test]
fn a_bad_attention_floor_names_the_field_and_the_range() {
    for (file, bad) in [("floor-zero.json", 0.0), ("floor-huge.json", 4096.0)] {
        let (code, err) = predict_on_edited_profile(file, |v| {
            v["gpu"]["attention_floor_head_dim_backward"] = serde_json::json!(bad)
        });
        assert_eq!(code, 2, "{bad}");
        assert!(
            err.contains(file)
                && err.contains("gpu.attention_floor_head_dim_backward")
                && err.contains("from 1 to 1024"),
            "{err}"
        );
    }
}
