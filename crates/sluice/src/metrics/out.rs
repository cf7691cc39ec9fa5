//! The Prometheus text exposition's writer (format 0.0.4): families, samples, labels, histograms.
//! A leaf that each part of /metrics (`render.rs`, `hosts.rs`, `exporter.rs`) writes into.

use std::fmt::Write;

use crate::stats::histogram::BOUNDS_US;
use crate::stats::HistogramSnapshot;

/// Builds the exposition: each family's HELP/TYPE once, then its samples.
pub(super) struct Out {
    pub(super) text: String,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

impl Out {
    pub(super) fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    pub(super) fn sample(&mut self, name: &str, l: &[(&str, &str)], v: f64) {
        let _ = writeln!(self.text, "{name}{} {v}", labels(l));
    }

    /// One family with one sample per row.
    pub(super) fn gauge_rows<R>(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        rows: &[R],
        f: impl Fn(&R) -> (Vec<(&'static str, String)>, f64),
    ) {
        self.family(name, kind, help);
        for r in rows {
            let (l, v) = f(r);
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            self.sample(name, &l, v);
        }
    }

    pub(super) fn histogram(&mut self, name: &str, l: &[(&str, &str)], h: &HistogramSnapshot) {
        for (i, count) in h.cumulative.iter().enumerate() {
            let le = match BOUNDS_US.get(i) {
                Some(b) => format!("{}", *b as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let mut with_le = l.to_vec();
            with_le.push(("le", &le));
            self.sample(&format!("{name}_bucket"), &with_le, *count as f64);
        }
        self.sample(&format!("{name}_sum"), l, h.sum_us as f64 / 1e6);
        self.sample(&format!("{name}_count"), l, h.count() as f64);
    }
}
