//! Log output in PgBouncer's line format (`2025-01-01 12:00:00.123 UTC [pid] LOG message`) to
//! stderr and/or the logfile, through tracing.

use std::cell::RefCell;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::Arc;

use parking_lot::Mutex;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Registry};

use crate::process::syslog::Syslog;

const TS: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");

/// PgBouncer-style line prefix.
struct PgFormat {
    pid: u32,
}

thread_local! {
    /// Per thread: the second last formatted ("YYYY-MM-DD HH:MM:SS") and a scratch buffer for the
    /// message, so that a log line costs one clock read and no allocation.
    static SCRATCH: RefCell<(i64, String, String)> = const { RefCell::new((i64::MIN, String::new(), String::new())) };
}

impl<S, N> FormatEvent<S, N> for PgFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "ERROR",
            Level::WARN => "WARNING",
            Level::INFO => "LOG",
            Level::DEBUG => "DEBUG",
            Level::TRACE => "NOISE",
        };
        SCRATCH.with(|cell| {
            let (second, ts, msg) = &mut *cell.borrow_mut();
            let now = OffsetDateTime::now_utc();
            if now.unix_timestamp() != *second {
                *second = now.unix_timestamp();
                ts.clear();
                ts.push_str(&now.format(TS).unwrap_or_default());
            }
            write!(
                w,
                "{ts}.{:03} UTC [{}] {level} ",
                now.millisecond(),
                self.pid
            )?;
            msg.clear();
            event.record(&mut Fields { out: msg });
            write_escaped(&mut w, msg)?;
            writeln!(w)
        })
    }
}

/// Collects an event's message (and any other fields as ` key=value`) as text.
struct Fields<'a> {
    out: &'a mut String,
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        use std::fmt::Write as _;
        let _ = if field.name() == "message" {
            write!(self.out, "{value:?}")
        } else {
            write!(self.out, " {}={value:?}", field.name())
        };
    }
}

/// Write `text` with control characters escaped (`\n`, `\u{1b}`), so that a client-supplied
/// name cannot forge log lines or terminal sequences. Plain text goes out in one piece.
fn write_escaped(w: &mut Writer<'_>, text: &str) -> fmt::Result {
    // Byte pre-check: C0 controls, DEL, and 0xC2 (the lead byte of the C1 controls U+0080-U+009F;
    // other U+0080-U+00BF characters take the careful path too, which writes them unchanged).
    if !text.bytes().any(|b| b < 0x20 || b == 0x7f || b == 0xc2) {
        return w.write_str(text);
    }
    for c in text.chars() {
        if c.is_control() {
            write!(w, "{}", c.escape_default())?;
        } else {
            w.write_char(c)?;
        }
    }
    Ok(())
}

/// Where lines go: stderr unless quiet, plus the logfile when set, plus syslog when on.
#[derive(Clone)]
pub struct LogSink {
    stderr: bool,
    file: Option<Arc<Mutex<File>>>,
    syslog: Arc<Mutex<Option<Syslog>>>,
}

pub struct SinkWriter<'a> {
    sink: &'a LogSink,
    level: Level,
}

impl Write for SinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.sink.stderr {
            let _ = io::stderr().write_all(buf);
        }
        if let Some(f) = &self.sink.file {
            let _ = f.lock().write_all(buf);
        }
        if let Some(s) = &*self.sink.syslog.lock() {
            s.send(self.level, buf);
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
        SinkWriter {
            sink: self,
            level: Level::INFO,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        SinkWriter {
            sink: self,
            level: *meta.level(),
        }
    }
}

/// The logfile as the sink writes it, to reopen after logrotate moved it away (SIGHUP, RELOAD).
#[derive(Clone)]
pub struct LogFile {
    path: String,
    file: Arc<Mutex<File>>,
}

impl LogFile {
    fn open(path: &str) -> io::Result<File> {
        OpenOptions::new().create(true).append(true).open(path)
    }

    /// Open the path again (a new file when the old one was moved) and write there from now on;
    /// on error the old file is kept.
    pub fn reopen(&self) -> io::Result<()> {
        let f = Self::open(&self.path)?;
        *self.file.lock() = f;
        Ok(())
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}

/// What can change in the log output while running: the logfile (reopened) and syslog (on, off,
/// facility, ident: reloadable keys).
#[derive(Clone)]
pub struct LogHandle {
    pub file: Option<LogFile>,
    syslog: Arc<Mutex<Option<Syslog>>>,
    /// The level filter, switched when `verbose` changes (SET, RELOAD).
    level: Option<reload::Handle<LevelFilter, Registry>>,
    /// The number of -v on the command line: `verbose` below it does not lower the level.
    cli_verbose: u32,
}

/// The level `verbose` (the number of -v) asks for: PgBouncer's LOG, DEBUG and NOISE.
fn level_for(verbose: u32) -> LevelFilter {
    match verbose {
        0 => LevelFilter::INFO,
        1 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

impl LogHandle {
    /// Apply a changed `verbose` setting (the command line's -v still count: the higher wins).
    pub fn set_verbose(&self, verbose: u32) {
        if let Some(h) = &self.level {
            let _ = h.reload(level_for(verbose.max(self.cli_verbose)));
        }
    }

    /// Apply `syslog`, `syslog_facility` and `syslog_ident`: lines go to the system's syslog
    /// socket from now on, or no longer. On error (no syslog daemon, an unknown facility) syslog
    /// stays off and the error is returned for the caller to log.
    pub fn set_syslog(&self, on: bool, facility: &str, ident: &str) -> io::Result<()> {
        let next = if on {
            Some(Syslog::connect(
                &crate::process::syslog::socket_path(),
                facility,
                ident,
            ))
            .transpose()
        } else {
            Ok(None)
        };
        match next {
            Ok(s) => {
                *self.syslog.lock() = s;
                Ok(())
            }
            Err(e) => {
                *self.syslog.lock() = None;
                Err(e)
            }
        }
    }
}

/// Install the global subscriber (the one process-wide thing, owned by main). `verbose` = number
/// of -v (`cli_verbose`) or the config's, whichever is higher. Returns the handle to reopen the
/// logfile, switch syslog and the level.
pub fn init(
    logfile: Option<&str>,
    quiet: bool,
    verbose: u32,
    cli_verbose: u32,
) -> io::Result<LogHandle> {
    let log = match logfile.filter(|f| !f.is_empty()) {
        Some(path) => Some(LogFile {
            path: path.to_string(),
            file: Arc::new(Mutex::new(LogFile::open(path)?)),
        }),
        None => None,
    };
    let file = log.as_ref().map(|l| l.file.clone());
    let syslog = Arc::new(Mutex::new(None));
    let sink = LogSink {
        stderr: !quiet,
        file,
        syslog: syslog.clone(),
    };
    // A reloadable filter: the admin console's SET verbose applies at once, as PgBouncer's.
    let (filter, level) = reload::Layer::new(level_for(verbose));
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .event_format(PgFormat {
                    pid: std::process::id(),
                })
                .with_writer(sink),
        )
        .try_init()
        .is_ok();
    Ok(LogHandle {
        file: log,
        syslog,
        level: installed.then_some(level),
        cli_verbose,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_log_text_are_escaped() {
        let mut out = String::new();
        write_escaped(&mut Writer::new(&mut out), "user\nLOG forged\u{1b}[31m").unwrap();
        assert_eq!(out, "user\\nLOG forged\\u{1b}[31m");
        let mut out = String::new();
        write_escaped(&mut Writer::new(&mut out), "plain db/üser@127.0.0.1").unwrap();
        assert_eq!(out, "plain db/üser@127.0.0.1");
    }
}
