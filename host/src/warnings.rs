//! For tests: what the plugin logged at warning level on the calling thread, so a test can
//! assert what an operator would read in Envoy's log (each test runs on its own thread).

use std::cell::RefCell;

thread_local! {
    static WARNINGS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

struct WarningLog;

impl log::Log for WarningLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            WARNINGS.with(|w| w.borrow_mut().push(record.args().to_string()));
        }
    }

    fn flush(&self) {}
}

static LOGGER: WarningLog = WarningLog;

/// The warnings logged on this thread so far; the logger is installed on first use (a test
/// binary has one logger: installing it again is a no-op).
pub fn logged_warnings() -> Vec<String> {
    let _ = log::set_logger(&LOGGER).map(|()| log::set_max_level(log::LevelFilter::Warn));
    WARNINGS.with(|w| w.borrow().clone())
}
