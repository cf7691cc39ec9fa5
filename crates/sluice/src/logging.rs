//! Log output in PgBouncer's line format (`2025-01-01 12:00:00.123 UTC [pid] LOG message`) to
//! stderr and/or the logfile, through tracing.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::Arc;

use parking_lot::Mutex;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

const TS: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]");

/// PgBouncer-style line prefix.
struct PgFormat {
    pid: u32,
}

impl<S, N> FormatEvent<S, N> for PgFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now = OffsetDateTime::now_utc();
        let ts = now.format(TS).unwrap_or_default();
        let level = match *event.metadata().level() {
            Level::ERROR => "ERROR",
            Level::WARN => "WARNING",
            Level::INFO => "LOG",
            Level::DEBUG => "DEBUG",
            Level::TRACE => "NOISE",
        };
        write!(w, "{ts} UTC [{}] {level} ", self.pid)?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Where lines go: stderr unless quiet, plus the logfile when set.
#[derive(Clone)]
pub struct LogSink {
    stderr: bool,
    file: Option<Arc<Mutex<File>>>,
}

pub struct SinkWriter<'a>(&'a LogSink);

impl Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0.stderr {
            let _ = io::stderr().write_all(buf);
        }
        if let Some(f) = &self.0.file {
            let _ = f.lock().write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogSink {
    type Writer = SinkWriter<'a>;
    fn make_writer(&'a self) -> Self::Writer {
        SinkWriter(self)
    }
}

/// Install the global subscriber (the one process-wide thing, owned by main). `verbose` = number of -v.
pub fn init(logfile: Option<&str>, quiet: bool, verbose: u32) -> io::Result<()> {
    let file = match logfile.filter(|f| !f.is_empty()) {
        Some(path) => Some(Arc::new(Mutex::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        ))),
        None => None,
    };
    let level = match verbose {
        0 => Level::INFO,
        1 => Level::DEBUG,
        _ => Level::TRACE,
    };
    let sink = LogSink {
        stderr: !quiet,
        file,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .event_format(PgFormat {
            pid: std::process::id(),
        })
        .with_writer(sink)
        .try_init();
    Ok(())
}
