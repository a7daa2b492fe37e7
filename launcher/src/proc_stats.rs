//! CPU time and memory of a running process (or one of its threads), read from `/proc`.
//!
//! Benchmarks judge Envoy by what it spends, not only by what a client sees: CPU per
//! request, the main thread's share while the singleton scrapes, RSS while the prefix index
//! fills. Linux only; on other systems every call returns an error.

use std::time::Duration;

/// `/proc/<pid>/stat` counts CPU time in clock ticks of `USER_HZ`, which is 100 on every
/// Linux architecture the project builds for (the kernel fixes it for user space).
const USER_HZ: u64 = 100;

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))
}

/// utime + stime from the text of a `stat` file. The command name may hold spaces and
/// parentheses, so fields are counted from after its last `)`.
fn cpu_from_stat(text: &str) -> Result<Duration, String> {
    let after_name = text.rsplit_once(')').map(|(_, rest)| rest).ok_or("stat has no ')'")?;
    // After the name: state is field 3 of the full line, utime 14 and stime 15.
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next().and_then(|f| f.parse().ok()).ok_or("stat has no utime")?;
    let stime: u64 = fields.next().and_then(|f| f.parse().ok()).ok_or("stat has no stime")?;
    Ok(Duration::from_millis((utime + stime) * 1000 / USER_HZ))
}

/// User plus system CPU time of the whole process (all threads), 10 ms resolution.
pub fn process_cpu(pid: u32) -> Result<Duration, String> {
    cpu_from_stat(&read(&format!("/proc/{pid}/stat"))?)
}

/// User plus system CPU time of one thread; `thread_cpu(pid, pid)` is the main thread.
pub fn thread_cpu(pid: u32, tid: u32) -> Result<Duration, String> {
    cpu_from_stat(&read(&format!("/proc/{pid}/task/{tid}/stat"))?)
}

/// Time one thread spent on a CPU, in nanoseconds (`/proc/.../schedstat`): a finer clock
/// than [`thread_cpu`] for short windows.
pub fn thread_scheduled(pid: u32, tid: u32) -> Result<Duration, String> {
    let text = read(&format!("/proc/{pid}/task/{tid}/schedstat"))?;
    let ns: u64 = text.split_whitespace().next().and_then(|f| f.parse().ok()).ok_or("schedstat unreadable")?;
    Ok(Duration::from_nanos(ns))
}

/// [`thread_scheduled`] summed over every thread of the process.
pub fn process_scheduled(pid: u32) -> Result<Duration, String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| format!("/proc/{pid}/task: {e}"))?;
    let mut total = Duration::ZERO;
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // A thread may exit between the listing and the read: skip it.
        total += thread_scheduled(pid, tid).unwrap_or_default();
    }
    Ok(total)
}

/// Resident set size in bytes (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> Result<u64, String> {
    let text = read(&format!("/proc/{pid}/status"))?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:")).ok_or("status has no VmRSS")?;
    let kib: u64 = line.split_whitespace().nth(1).and_then(|f| f.parse().ok()).ok_or("VmRSS unreadable")?;
    Ok(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_past_a_hostile_command_name() {
        let line = "42 (we ird) (name)) S 1 2 3 4 5 6 7 8 9 10 250 30 0 0 20 0 1 0 100 200 300";
        assert_eq!(cpu_from_stat(line), Ok(Duration::from_millis(2_800)));
        assert!(cpu_from_stat("garbage").is_err());
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(rss_bytes(pid).unwrap() > 0);
        assert!(process_cpu(pid).is_ok() && thread_cpu(pid, pid).is_ok());
        assert!(process_scheduled(pid).unwrap() > Duration::ZERO);
    }
}
