//! `exec_shell_command` and `get_info`: child processes run by `POST /tools`, as
//! llama-server's. A command runs as `sh -c` in its own process group, stdout and stderr into
//! one pipe, under a timeout and an output cap; when it ends, times out, its client goes away or
//! the server shuts down, the whole group is killed, so nothing it started is left running.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use super::{CallError, opt_i64, req_str};

/// Most output bytes of a command.
const EXEC_MAX_OUTPUT: usize = 16 * 1024;
/// Default and longest timeout of a command, in seconds.
const EXEC_DEFAULT_TIMEOUT: u64 = 10;
const EXEC_MAX_TIMEOUT: u64 = 60;
/// After the command exits, how long output still in the pipe (or written by a process it left
/// behind) is waited for.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// How a process ended.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Its output, stdout and stderr interleaved as written, cut at the cap.
    pub output: String,
    /// The exit status (-1: killed or not started).
    pub code: i32,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Whether the sink, or the server's shutdown, stopped it.
    pub stopped: bool,
}

/// Kills a process group when dropped: a command is never left running, whatever path its
/// caller takes out (a dropped future included).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.filter(|&p| p > 0) {
            // SAFETY: kill(2) with a negative pid signals the process group `pgid`, which the
            // child created (`process_group(0)`), so it names only the child and what it spawned.
            // It takes no pointers; an error (the group is already gone) is harmless.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

/// Completes when the server shuts down (never, if nothing can flip `stop` any more).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Text of `buf` that is valid UTF-8, keeping an incomplete trailing character for later.
fn take_utf8(buf: &mut Vec<u8>) -> String {
    let valid = match std::str::from_utf8(buf) {
        Ok(_) => buf.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => buf.len(),
    };
    let text = String::from_utf8_lossy(&buf[..valid]).into_owned();
    buf.drain(..valid);
    text
}

/// Starts `argv` in `cwd`, in a process group of its own (killed when the guard drops), its
/// stdout and stderr into one pipe, read through the returned receiver.
fn spawn_piped(
    argv: &[&str],
    cwd: Option<&Path>,
) -> Result<(tokio::process::Child, GroupGuard, tokio::net::unix::pipe::Receiver), String> {
    let (reader, writer) = std::io::pipe().map_err(|e| format!("failed to create a pipe: {e}"))?;
    let writer2 = writer.try_clone().map_err(|e| format!("failed to create a pipe: {e}"))?;
    let mut cmd = tokio::process::Command::new(argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(writer2).stderr(writer);
    cmd.process_group(0).kill_on_drop(true);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let spawned = cmd.spawn();
    // The parent's copies of the write end go with the command, so the pipe ends with the child.
    drop(cmd);
    let child = spawned.map_err(|e| format!("failed to start {}: {e}", argv[0]))?;
    let guard = GroupGuard(child.id().and_then(|p| i32::try_from(p).ok()));
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())
        .map_err(|e| format!("failed to read the command's output: {e}"))?;
    Ok((child, guard, pipe))
}

/// Runs `argv` in `cwd` (the server's folder when `None`) for at most `timeout`, keeping at most
/// `max_output` bytes, each piece of output also given to `sink` (which returns false to stop
/// the process: its client went away). `stop` flips when the server shuts down.
pub(crate) async fn run(
    argv: &[&str],
    cwd: Option<&Path>,
    timeout: Duration,
    max_output: usize,
    mut sink: impl FnMut(&str) -> bool,
    mut stop: watch::Receiver<bool>,
) -> Outcome {
    let mut out = Outcome { code: -1, ..Outcome::default() };
    let (mut child, _guard, mut pipe) = match spawn_piped(argv, cwd) {
        Ok(p) => p,
        Err(e) => {
            out.output = e;
            return out;
        }
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut raw, mut kept, mut truncated) = (Vec::new(), 0usize, false);
    let mut exited: Option<tokio::time::Instant> = None;
    let mut chunk = [0u8; 4096];
    loop {
        let drain_end = exited.map(|t| t + DRAIN_AFTER_EXIT);
        tokio::select! {
            n = pipe.read(&mut chunk) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = max_output.saturating_sub(kept);
                    truncated |= n > room;
                    raw.extend_from_slice(&chunk[..n.min(room)]);
                    kept += n.min(room);
                    let text = take_utf8(&mut raw);
                    out.output.push_str(&text);
                    if !text.is_empty() && !sink(&text) {
                        out.stopped = true;
                        break;
                    }
                }
            },
            status = child.wait(), if exited.is_none() => {
                out.code = status.ok().and_then(|s| s.code()).unwrap_or(-1);
                exited = Some(tokio::time::Instant::now());
            }
            _ = tokio::time::sleep_until(drain_end.unwrap_or(deadline)), if drain_end.is_some() => break,
            _ = tokio::time::sleep_until(deadline), if exited.is_none() => {
                out.timed_out = true;
                break;
            }
            _ = stopped(&mut stop) => {
                out.stopped = true;
                break;
            }
        }
    }
    // The output ended (or was refused) before the exit status was read.
    if exited.is_none() && !out.timed_out && !out.stopped {
        tokio::select! {
            status = child.wait() => {
                out.code = status.ok().and_then(|s| s.code()).unwrap_or(-1);
                exited = Some(tokio::time::Instant::now());
            }
            _ = tokio::time::sleep_until(deadline) => out.timed_out = true,
            _ = stopped(&mut stop) => out.stopped = true,
        }
    }
    if exited.is_none() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    out.output.push_str(&String::from_utf8_lossy(&raw));
    if truncated {
        out.output.push_str("\n[output truncated]");
    }
    out
}

/// The arguments of `exec_shell_command`: the command line, its timeout and output cap.
pub(crate) fn exec_args(params: &Value) -> Result<(String, Duration, usize), CallError> {
    let command = req_str(params, "command")?;
    let timeout = opt_i64(params, "timeout")?.map_or(EXEC_DEFAULT_TIMEOUT, |t| t.max(0) as u64);
    let max_output = opt_i64(params, "max_output_size")?.map_or(EXEC_MAX_OUTPUT, |m| m.max(0) as usize);
    Ok((command, Duration::from_secs(timeout.min(EXEC_MAX_TIMEOUT)), max_output.min(EXEC_MAX_OUTPUT)))
}

/// The line that ends a command's output.
pub(crate) fn exit_line(o: &Outcome) -> String {
    let mut s = format!("\n[exit code: {}]", o.code);
    if o.timed_out {
        s.push_str(" [exit due to timed out]");
    }
    s
}

/// `exec_shell_command`, whole: `{"plain_text_response": output + exit line}`.
pub(crate) async fn exec(
    params: &Value,
    cwd: Option<&Path>,
    stop: watch::Receiver<bool>,
) -> Result<Value, CallError> {
    let (command, timeout, max_output) = exec_args(params)?;
    let o = run(&["sh", "-c", &command], cwd, timeout, max_output, |_| true, stop).await;
    if o.stopped {
        return Err(CallError::Failed("the server is shutting down".into()));
    }
    Ok(json!({"plain_text_response": format!("{}{}", o.output, exit_line(&o))}))
}

/// `get_info`: the system (`uname -a`) and the working folder tools use.
pub(crate) async fn get_info(cwd: Option<&Path>, stop: watch::Receiver<bool>) -> Result<Value, CallError> {
    let o = run(&["uname", "-a"], None, Duration::from_secs(5), 4096, |_| true, stop).await;
    let os = if o.code == 0 && !o.timed_out { o.output.trim().to_string() } else { "unknown".into() };
    let cwd = match cwd {
        Some(c) => c.to_string_lossy().into_owned(),
        None => std::env::current_dir().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    Ok(json!({"os": os, "cwd": cwd}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_stop() -> watch::Receiver<bool> {
        watch::channel(false).1
    }

    #[tokio::test]
    async fn output_exit_code_and_cwd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = run(
            &["sh", "-c", "pwd; echo err >&2; exit 3"],
            Some(dir.path()),
            Duration::from_secs(5),
            4096,
            |_| true,
            no_stop(),
        )
        .await;
        assert_eq!(o.code, 3);
        let canon = dir.path().canonicalize().expect("canon");
        assert!(o.output.contains(canon.to_str().expect("utf8")), "{}", o.output);
        assert!(o.output.contains("err"));
    }

    #[tokio::test]
    async fn timeout_cap_and_background_children() {
        let started = std::time::Instant::now();
        let o =
            run(&["sh", "-c", "sleep 30"], None, Duration::from_millis(300), 4096, |_| true, no_stop()).await;
        assert!(o.timed_out && started.elapsed() < Duration::from_secs(5));
        assert!(exit_line(&o).contains("[exit due to timed out]"));
        let o = run(
            &["sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a"],
            None,
            Duration::from_secs(5),
            1000,
            |_| true,
            no_stop(),
        )
        .await;
        assert!(o.output.starts_with(&"a".repeat(1000)) && o.output.ends_with("[output truncated]"));
        // A background child holding the pipe does not keep the call waiting.
        let started = std::time::Instant::now();
        let o = run(
            &["sh", "-c", "sleep 30 & echo hi"],
            None,
            Duration::from_secs(10),
            4096,
            |_| true,
            no_stop(),
        )
        .await;
        assert_eq!((o.code, o.timed_out), (0, false));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_sink_that_refuses_or_a_shutdown_stops_the_command() {
        let o = run(
            &["sh", "-c", "while true; do echo x; sleep 0.05; done"],
            None,
            Duration::from_secs(10),
            4096,
            |_| false,
            no_stop(),
        )
        .await;
        assert!(o.stopped);
        let (tx, rx) = watch::channel(false);
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = tx.send(true);
            tx
        });
        let started = std::time::Instant::now();
        let o = run(&["sh", "-c", "sleep 30"], None, Duration::from_secs(20), 4096, |_| true, rx).await;
        assert!(o.stopped && started.elapsed() < Duration::from_secs(5));
        drop(stopper.await);
    }

    #[test]
    fn exec_args_clamp() {
        let (_, t, m) =
            exec_args(&json!({"command": "x", "timeout": 600, "max_output_size": 1 << 30})).expect("args");
        assert_eq!((t, m), (Duration::from_secs(60), 16 * 1024));
        assert!(exec_args(&json!({"timeout": 1})).is_err());
    }
}
