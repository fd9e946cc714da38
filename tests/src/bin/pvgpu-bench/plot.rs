//! `--plot FILE.svg`: the null-call latency distribution of each transport,
//! and copy bandwidth against size in each direction, from pageable memory
//! (solid) and page-locked memory (thin, with dots).

use crate::report::Results;
use anyhow::{Result, anyhow};
use hdrhistogram::Histogram;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 5] =
    [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(148, 103, 189), RGBColor(255, 127, 14)];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// Draws the plot into `path`.
pub fn draw(path: &Path, title: &str, rtt: &[(String, Histogram<u64>)], results: &Results<'_>, sizes: &[usize]) -> Result<()> {
    let root = SVGBackend::new(path, (1200, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| anyhow!("{e}"))?;
    let (top, bottom) = root.split_vertically(480);
    latency(&top, rtt).map_err(|e| anyhow!("latency plot: {e}"))?;
    let (left, right) = bottom.split_horizontally(600);
    let transports: Vec<&str> = rtt.iter().map(|(t, _)| t.as_str()).collect();
    bandwidth(&left, "host to device", "htod", &transports, results, sizes).map_err(|e| anyhow!("bandwidth plot: {e}"))?;
    bandwidth(&right, "device to host", "dtoh", &transports, results, sizes).map_err(|e| anyhow!("bandwidth plot: {e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type PlotResult = Result<(), Box<dyn std::error::Error>>;

fn latency(area: &Area<'_>, rtt: &[(String, Histogram<u64>)]) -> PlotResult {
    let lo = rtt.iter().map(|(_, h)| h.value_at_quantile(0.001)).min().unwrap_or(100).max(10) as f64 / 1e3;
    let hi = rtt.iter().map(|(_, h)| h.value_at_quantile(0.999)).max().unwrap_or(100_000) as f64 / 1e3;
    let mut series = Vec::new();
    let mut ymax = 0.0f64;
    for (name, h) in rtt {
        let total = h.len().max(1) as f64;
        let pts: Vec<(f64, f64)> = h
            .iter_log((lo * 1e3) as u64, 1.05)
            .map(|v| (v.value_iterated_to() as f64 / 1e3, v.count_since_last_iteration() as f64 / total * 100.0))
            .filter(|&(x, _)| x >= lo && x <= hi * 1.05)
            .collect();
        ymax = pts.iter().map(|p| p.1).fold(ymax, f64::max);
        series.push((name, pts));
    }
    let mut chart = ChartBuilder::on(area)
        .caption("null-call round trip: share of calls per latency bucket (5 % wide)", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((lo * 0.9..hi * 1.1).log_scale(), 0.0..ymax * 1.1)?;
    chart.configure_mesh().x_desc("microseconds (log scale)").y_desc("% of calls").draw()?;
    for (i, (name, pts)) in series.into_iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    Ok(())
}

fn bandwidth(area: &Area<'_>, caption: &str, dir: &str, transports: &[&str], r: &Results<'_>, sizes: &[usize]) -> PlotResult {
    let (Some(&first), Some(&last)) = (sizes.first(), sizes.last()) else { return Ok(()) };
    let mut ymax = 1.0f64;
    let mut lines = Vec::new();
    for (i, t) in transports.iter().enumerate() {
        for pinned in [false, true] {
            let prefix = if pinned { "pinned_" } else { "" };
            let pts: Vec<(f64, f64)> =
                sizes.iter().filter_map(|&s| r.get(t, &format!("{prefix}{dir}_gbps_{s}")).map(|m| (s as f64 / 1024.0, m.median))).collect();
            if pts.is_empty() {
                continue;
            }
            ymax = pts.iter().map(|p| p.1).fold(ymax, f64::max);
            lines.push((format!("{t}{}", if pinned { " (page-locked)" } else { "" }), i, pinned, pts));
        }
    }
    let mut chart = ChartBuilder::on(area)
        .caption(format!("copies {caption}"), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((first as f64 / 1024.0 * 0.8..last as f64 / 1024.0 * 1.25).log_scale(), 0.0..ymax * 1.1)?;
    chart.configure_mesh().x_desc("KiB per copy (log scale)").y_desc("GB/s").draw()?;
    for (label, i, pinned, pts) in lines {
        let c = color(i);
        let width = if pinned { 1 } else { 2 };
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(width)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(width)));
        if pinned {
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))?;
        }
    }
    chart.configure_series_labels().position(SeriesLabelPosition::UpperLeft).border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    Ok(())
}
