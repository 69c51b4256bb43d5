//! Worker processes: spawn `pipeline worker` from the same executable, send
//! the handshake, and read its stdout (protocol frames) and stderr (log
//! lines) each on its own thread — a full pipe would otherwise stall the
//! child. Every thread reports into one [`Event`] channel.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use crate::report::Report;

use crossbeam_channel::Sender;
use pipeline_core::{
    DeviceSpec, FromWorker, PROTOCOL_VERSION, ToWorker, WorkerConfig, read_frame, write_frame,
};

/// Something a worker's reader thread saw.
#[derive(Debug)]
pub(crate) enum Event {
    /// A protocol message from worker `id`.
    Message { id: usize, message: FromWorker },
    /// Worker `id` closed its stdout (it exited, or is about to); `error` is
    /// set when the stream broke mid-frame or held garbage.
    Closed { id: usize, error: Option<String> },
    /// A committer thread wrote a chunk's part (taking that many seconds),
    /// or could not.
    Committed { result: std::io::Result<f64> },
}

/// A running worker process.
pub(crate) struct WorkerHandle {
    /// Unique for the run (a respawned worker gets a new id).
    pub(crate) id: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    threads: Vec<JoinHandle<()>>,
}

/// `CUDA_VISIBLE_DEVICES` for a worker: its own GPU only, by its UUID
/// where it is an NVIDIA GPU (CUDA numbers GPUs fastest first unless told
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and counts NVIDIA's only, where `gpu:N`
/// counts every GPU in PCI bus order), a MIG instance by its own `MIG-`
/// UUID (its GPU's would give CUDA the whole GPU); or none at all (the
/// CPU, lavapipe, another vendor's GPU, which CUDA cannot name), so no
/// library in the child touches another worker's GPU.
fn visible_devices(config: &WorkerConfig) -> String {
    match config.device {
        DeviceSpec::Gpu(i) => config.cuda_uuids.get(&i).cloned().unwrap_or_default(),
        DeviceSpec::Cpu | DeviceSpec::Software => String::new(),
    }
}

impl WorkerHandle {
    /// Starts `exe worker` for `config` and sends the handshake.
    pub(crate) fn spawn(
        exe: &Path,
        id: usize,
        config: &WorkerConfig,
        events: &Sender<Event>,
        report: &Arc<dyn Report>,
    ) -> std::io::Result<Self> {
        // Its own process group: a Ctrl-C on the terminal reaches the
        // coordinator only, which decides what the workers finish.
        let mut command = Command::new(exe);
        if let Some(dir) = pipeline_core::runtime_dir_for_children() {
            command.env("XDG_RUNTIME_DIR", dir);
        }
        if let Some((name, value)) = pipeline_core::allocator_env() {
            command.env(name, value);
        }
        let mut child = command
            .arg("worker")
            .process_group(0)
            .env("CUDA_VISIBLE_DEVICES", visible_devices(config))
            .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            .env("PIPELINE_WORKER_NAME", &config.name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let taken = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(mut stdin), Some(stdout), Some(stderr)) = taken else {
            let _ = child.kill();
            return Err(std::io::Error::other("worker pipes were not created"));
        };
        let hello = ToWorker::Hello {
            version: PROTOCOL_VERSION,
            config: Box::new(config.clone()),
        };
        write_frame(&mut stdin, &hello)?;

        let tx = events.clone();
        let frames = thread::Builder::new()
            .name(format!("{}-stdout", config.name))
            .spawn(move || {
                let mut stdout = BufReader::with_capacity(1 << 20, stdout);
                let error = loop {
                    match read_frame::<_, FromWorker>(&mut stdout) {
                        Ok(Some(message)) => {
                            if tx.send(Event::Message { id, message }).is_err() {
                                return; // the run is over
                            }
                        }
                        Ok(None) => break None,
                        Err(e) => break Some(e.to_string()),
                    }
                };
                let _ = tx.send(Event::Closed { id, error });
            })?;
        let name = config.name.clone();
        let report = Arc::clone(report);
        let logs = thread::Builder::new()
            .name(format!("{}-stderr", config.name))
            .spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    match line {
                        Ok(line) => report.warn(&format!("[{name}] {line}")),
                        Err(_) => break,
                    }
                }
            })?;
        Ok(Self {
            id,
            child,
            stdin: Some(stdin),
            threads: vec![frames, logs],
        })
    }

    /// Sends a message; an error means the worker is gone (its `Closed`
    /// event follows).
    pub(crate) fn send(&mut self, message: &ToWorker) -> std::io::Result<()> {
        match &mut self.stdin {
            Some(stdin) => write_frame(stdin, message),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Tells the worker there is no more work and closes its stdin.
    pub(crate) fn finish(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = write_frame(&mut stdin, &ToWorker::Finish);
            let _ = stdin.flush();
        }
    }

    /// Kills the process (no-op if it already exited).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Waits for the process and its reader threads.
    pub(crate) fn wait(mut self) -> std::io::Result<ExitStatus> {
        self.stdin = None;
        let status = self.child.wait();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        status
    }

    /// Whether the process has exited, without waiting.
    /// The process's peak resident memory so far (Linux `VmHWM`), while
    /// it runs.
    pub(crate) fn peak_rss_bytes(&self) -> Option<u64> {
        peak_rss_bytes(&format!("/proc/{}/status", self.child.id()))
    }

    pub(crate) fn try_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

/// How a worker's exit reads to a person: `exit code 3`, `signal 11 (SIGSEGV)`.
pub fn describe_exit(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exit code {code}");
    }
    match status.signal() {
        Some(signal) => {
            let name = match signal {
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            format!("signal {signal}{name}")
        }
        None => "an unknown status".into(),
    }
}

/// `VmHWM` (peak resident set) from a `/proc/PID/status` file, in bytes.
pub(crate) fn peak_rss_bytes(status_file: &str) -> Option<u64> {
    let text = std::fs::read_to_string(status_file).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::visible_devices;
    use pipeline_core::{DecodeLimits, DeviceSpec, ModelKind, Task, WorkerConfig};

    fn on(device: DeviceSpec) -> WorkerConfig {
        WorkerConfig {
            name: "w".into(),
            device,
            model: ModelKind::Tiny.into(),
            weights: None,
            resolved: Default::default(),
            seed: 0,
            task: Task::Embed,
            pooling: None,
            classes: None,
            precision: Default::default(),
            engine: Default::default(),
            batch_size: None,
            loader_threads: 1,
            preprocess: ModelKind::Tiny.default_preprocess(),
            limits: DecodeLimits::default(),
            remote: Default::default(),
            cuda_uuids: [
                (1, "GPU-1111".to_owned()),
                (3, "GPU-3333".to_owned()),
                (4, "MIG-4444".to_owned()),
            ]
            .into(),
            onnx_runtime: None,
        }
    }

    /// A worker sees its own GPU only: an NVIDIA GPU by its UUID, a MIG
    /// instance by its own; another vendor's GPU (whose `gpu:N` would name
    /// some NVIDIA GPU to CUDA), the CPU and lavapipe none.
    #[test]
    fn workers_see_their_own_gpu_by_uuid() {
        assert_eq!(visible_devices(&on(DeviceSpec::Gpu(3))), "GPU-3333");
        assert_eq!(visible_devices(&on(DeviceSpec::Gpu(1))), "GPU-1111");
        assert_eq!(visible_devices(&on(DeviceSpec::Gpu(4))), "MIG-4444");
        assert_eq!(visible_devices(&on(DeviceSpec::Gpu(2))), "");
        assert_eq!(visible_devices(&on(DeviceSpec::Cpu)), "");
        assert_eq!(visible_devices(&on(DeviceSpec::Software)), "");
    }
}
