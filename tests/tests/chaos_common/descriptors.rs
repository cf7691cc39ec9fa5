//! What the soak reads of the pooler process afterwards: its sockets and its panics.

/// A process's descriptors: its TCP sockets as (local port, remote port, state) from
/// /proc/net/tcp, and the links of the others.
pub(super) struct Descriptors {
    pub tcp: Vec<(u16, u16, String)>,
    pub other: Vec<String>,
}

impl Descriptors {
    pub fn of(pid: u32) -> Descriptors {
        let mut by_inode = std::collections::HashMap::new();
        for table in ["tcp", "tcp6"] {
            let text =
                std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 10 {
                    continue;
                }
                let port = |a: &str| {
                    a.rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                        .unwrap_or(0)
                };
                let state = match f[3] {
                    "01" => "ESTABLISHED",
                    "02" => "SYN_SENT",
                    "06" => "TIME_WAIT",
                    "07" => "CLOSE",
                    "08" => "CLOSE_WAIT",
                    "0A" => "LISTEN",
                    other => other,
                };
                by_inode.insert(
                    f[9].to_string(),
                    (port(f[1]), port(f[2]), state.to_string()),
                );
            }
        }
        let mut d = Descriptors {
            tcp: Vec::new(),
            other: Vec::new(),
        };
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let link = std::fs::read_link(entry.path())
                .map(|l| l.display().to_string())
                .unwrap_or_default();
            let inode = link
                .strip_prefix("socket:[")
                .and_then(|l| l.strip_suffix(']'));
            match inode.and_then(|i| by_inode.get(i)) {
                Some(t) => d.tcp.push(t.clone()),
                None => d.other.push(link),
            }
        }
        d
    }
}

/// The log lines from each panic on (its message and backtrace), up to 30 each.
pub(super) fn panic_lines(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("panicked"))
        .flat_map(|(i, _)| lines[i..lines.len().min(i + 30)].iter().copied())
        .collect::<Vec<_>>()
        .join("\n")
}
