//! What a cluster scheduler tells a run through its environment: which
//! shard of the dataset this process owns, and which GPUs it was given.
//!
//! Shards, first match wins:
//! 1. `--shard i/n`;
//! 2. Slurm: a job array (`SLURM_ARRAY_TASK_ID` within `SLURM_ARRAY_TASK_MIN`
//!    … `MAX` by `SLURM_ARRAY_TASK_STEP`, `SLURM_ARRAY_TASK_COUNT` tasks)
//!    and/or the tasks of an `srun` step (`SLURM_PROCID` of
//!    `SLURM_STEP_NUM_TASKS`, which only `srun` sets: a batch script's own
//!    shell is not a step task). Both together multiply: array task `a` of
//!    `A`, step task `p` of `P` is shard `a·P + p` of `A·P`;
//! 3. a Kubernetes Indexed Job: `JOB_COMPLETION_INDEX` with `--num-shards`
//!    (the Job's `completions`, which the pod cannot see).
//!
//! GPUs: `CUDA_VISIBLE_DEVICES`, else `SLURM_STEP_GPUS`, else
//! `SLURM_JOB_GPUS`, limit `--gpus all`. `CUDA_VISIBLE_DEVICES` is read as
//! CUDA reads it, over NVIDIA's enumeration (`visible.rs`), where the
//! machine has NVIDIA GPUs; Slurm's variables, and `CUDA_VISIBLE_DEVICES`
//! on a machine without NVIDIA's GPUs (Slurm sets it for every vendor's),
//! are the tool's `gpu:N` indices, the latter ending where CUDA's list
//! would.

use pipeline_core::Shard;

use crate::visible::{DeviceOrder, ListEnd, NvidiaDevice, Visible, cuda_visible, read_list};

/// Reads one environment variable (a closure, so tests need no real env).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Where a run's shard came from, for the log and the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardChoice {
    /// The shard.
    pub shard: Shard,
    /// e.g. `--shard`, `SLURM_ARRAY_TASK_ID=2 of 3 tasks`.
    pub source: String,
}

fn number(env: Env<'_>, name: &str) -> Result<Option<u32>, String> {
    match env(name).filter(|v| !v.trim().is_empty()) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v} is not a number")),
    }
}

/// The array task's position and the array's size, when in a job array.
fn slurm_array(env: Env<'_>) -> Result<Option<(u32, u32, String)>, String> {
    let (Some(id), Some(count)) = (
        number(env, "SLURM_ARRAY_TASK_ID")?,
        number(env, "SLURM_ARRAY_TASK_COUNT")?,
    ) else {
        return Ok(None);
    };
    let min = number(env, "SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
    let step = number(env, "SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
    let position = id
        .checked_sub(min)
        .map(|d| d / step)
        .filter(|p| *p < count)
        .ok_or_else(|| {
            format!(
                "SLURM_ARRAY_TASK_ID={id} is not one of {count} tasks from {min} by {step}; \
                 pass --shard i/n"
            )
        })?;
    let source = format!("SLURM_ARRAY_TASK_ID={id} of {count} tasks");
    Ok(Some((position, count, source)))
}

/// The step task's rank and the step's size, when run by `srun`.
fn slurm_step(env: Env<'_>) -> Result<Option<(u32, u32, String)>, String> {
    let (Some(rank), Some(tasks)) = (
        number(env, "SLURM_PROCID")?,
        number(env, "SLURM_STEP_NUM_TASKS")?,
    ) else {
        return Ok(None);
    };
    if tasks <= 1 {
        return Ok(None);
    }
    if rank >= tasks {
        return Err(format!(
            "SLURM_PROCID={rank} with SLURM_STEP_NUM_TASKS={tasks}"
        ));
    }
    Ok(Some((
        rank,
        tasks,
        format!("SLURM_PROCID={rank} of {tasks} tasks"),
    )))
}

/// This run's shard: from `--shard`, else the scheduler's environment,
/// else the whole dataset (`None`).
pub fn choose_shard(
    flag: Option<&str>,
    num_shards: Option<u32>,
    env: Env<'_>,
) -> Result<Option<ShardChoice>, String> {
    if let Some(flag) = flag {
        let shard: Shard = flag.parse().map_err(|e| format!("{e}"))?;
        return Ok(Some(ShardChoice {
            shard,
            source: "--shard".into(),
        }));
    }
    let array = slurm_array(env)?;
    let step = slurm_step(env)?;
    let slurm = match (array, step) {
        (Some((a, count_a, sa)), Some((p, count_p, sp))) => {
            Some((a * count_p + p, count_a * count_p, format!("{sa}, {sp}")))
        }
        (Some(one), None) | (None, Some(one)) => Some(one),
        (None, None) => None,
    };
    if let Some((index, count, source)) = slurm {
        return Ok(Some(ShardChoice {
            shard: Shard { index, count },
            source,
        }));
    }
    if let Some(index) = number(env, "JOB_COMPLETION_INDEX")? {
        let count = num_shards.ok_or_else(|| {
            format!(
                "JOB_COMPLETION_INDEX={index} is set (a Kubernetes Indexed Job): pass \
                 --num-shards with the Job's completions"
            )
        })?;
        if index >= count {
            return Err(format!(
                "JOB_COMPLETION_INDEX={index} is not below --num-shards {count}"
            ));
        }
        return Ok(Some(ShardChoice {
            shard: Shard { index, count },
            source: format!("JOB_COMPLETION_INDEX={index} of {count}"),
        }));
    }
    if num_shards.is_some() {
        return Err(
            "--num-shards needs JOB_COMPLETION_INDEX (a Kubernetes Indexed Job); \
                    elsewhere use --shard i/n"
                .into(),
        );
    }
    Ok(None)
}

/// The variable that limits this process's GPUs and its value; `None`
/// when nothing does.
fn gpu_limit(env: Env<'_>) -> Option<(&'static str, String)> {
    // An empty CUDA_VISIBLE_DEVICES means "no GPU"; the Slurm variables
    // count only when they hold something.
    let cuda = env("CUDA_VISIBLE_DEVICES").map(|v| ("CUDA_VISIBLE_DEVICES", v));
    let slurm = ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS"]
        .into_iter()
        .find_map(|name| Some((name, env(name).filter(|v| !v.trim().is_empty())?)));
    cuda.or(slurm)
}

/// Which variable limits this process's GPUs, as `NAME=value`, for the
/// log and the report; `None` when nothing does.
pub fn scheduler_gpus_source(env: Env<'_>) -> Option<String> {
    gpu_limit(env).map(|(name, value)| format!("{name}={value}"))
}

/// The GPUs the scheduler handed this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenGpus {
    /// Their `gpu:N` indices, in the variable's order.
    pub gpus: Vec<usize>,
    /// The variable that said so, as `NAME=value`.
    pub source: String,
    /// Where `CUDA_VISIBLE_DEVICES` ends, as CUDA reads it, before its
    /// last entry.
    pub ended: Option<ListEnd>,
    /// Whether `CUDA_VISIBLE_DEVICES`' indices were counted in PCI bus
    /// order standing in for CUDA's fastest-first (the driver did not
    /// give it).
    pub bus_order_stands_in: bool,
}

impl GivenGpus {
    /// Why the variable gives no GPU, where an entry ended its list
    /// before any: one clause for the run's notice.
    pub fn why_none(&self) -> Option<String> {
        let end = self.ended.as_ref().filter(|_| self.gpus.is_empty())?;
        Some(if end.is_all() {
            format!(
                "{} names no GPU to CUDA; unset it to use every GPU",
                self.source
            )
        } else {
            format!("{} names no GPU: {end}", self.source)
        })
    }
}

/// The GPUs the scheduler handed this process; `None` when nothing limits
/// them. `CUDA_VISIBLE_DEVICES` is read as CUDA reads it (see
/// [`crate::cuda_visible`]) over `nvidia`, the machine's NVIDIA GPUs, or,
/// without any, with its indices as `gpu:N` (Slurm sets it for every
/// vendor's GPUs); the one error, in one line, is a `GPU-…`/`MIG-…` entry
/// that names no device, or several. Slurm's variables' integers are
/// `gpu:N`, and the rest is ignored.
pub fn scheduler_gpus(env: Env<'_>, nvidia: &[NvidiaDevice]) -> Result<Option<GivenGpus>, String> {
    let Some((name, value)) = gpu_limit(env) else {
        return Ok(None);
    };
    let source = format!("{name}={value}");
    let given = |visible: Visible| {
        Some(GivenGpus {
            gpus: visible.gpus,
            source: source.clone(),
            ended: visible.ended,
            bus_order_stands_in: visible.bus_order_stands_in,
        })
    };
    if name == "CUDA_VISIBLE_DEVICES" && !nvidia.is_empty() {
        let order = DeviceOrder::from_env(env("CUDA_DEVICE_ORDER").as_deref());
        return cuda_visible(&value, order, nvidia).map(given);
    }
    if name == "CUDA_VISIBLE_DEVICES" {
        // No NVIDIA GPU to read it over: Slurm's indices keep meaning
        // `gpu:N`, the list ends where CUDA's would, and a UUID names no
        // GPU of this machine.
        return read_list(
            &value,
            |n| Ok(vec![n]),
            |entry| {
                Err(format!(
                    "{entry} is a UUID, and NVIDIA's driver lists no GPU here (see pipeline \
                     devices)"
                ))
            },
        )
        .map(given);
    }
    let gpus = value
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    Ok(Some(GivenGpus {
        gpus,
        source,
        ended: None,
        bus_order_stands_in: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn shard(pairs: &[(&str, &str)], num: Option<u32>) -> Result<Option<(u32, u32)>, String> {
        let env = env_of(pairs);
        choose_shard(None, num, &env).map(|c| c.map(|c| (c.shard.index, c.shard.count)))
    }

    #[test]
    fn the_flag_wins_over_the_environment() {
        let env = env_of(&[
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ]);
        let choice = choose_shard(Some("2/5"), None, &env).expect("valid");
        assert_eq!(choice.map(|c| (c.shard.index, c.shard.count)), Some((2, 5)));
        assert!(choose_shard(Some("5/5"), None, &env).is_err());
    }

    #[test]
    fn slurm_arrays_count_from_their_first_id_by_their_step() {
        let plain = [
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ];
        assert_eq!(shard(&plain, None), Ok(Some((2, 3))));
        let offset = [
            ("SLURM_ARRAY_TASK_ID", "12"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ];
        assert_eq!(shard(&offset, None), Ok(Some((1, 3))));
        let outside = [
            ("SLURM_ARRAY_TASK_ID", "9"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "10"),
        ];
        assert!(shard(&outside, None).is_err());
    }

    #[test]
    fn srun_tasks_are_shards_but_a_batch_shell_is_not() {
        let step = [("SLURM_PROCID", "1"), ("SLURM_STEP_NUM_TASKS", "2")];
        assert_eq!(shard(&step, None), Ok(Some((1, 2))));
        // `sbatch -n 4` without srun: the batch shell has SLURM_NTASKS but
        // is one process, so it must run everything.
        let batch = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")];
        assert_eq!(shard(&batch, None), Ok(None));
        let both = [
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_PROCID", "1"),
            ("SLURM_STEP_NUM_TASKS", "2"),
        ];
        assert_eq!(shard(&both, None), Ok(Some((3, 6))));
    }

    #[test]
    fn kubernetes_indexed_jobs_need_the_completion_count() {
        let k8s = [("JOB_COMPLETION_INDEX", "3")];
        assert_eq!(shard(&k8s, Some(4)), Ok(Some((3, 4))));
        assert!(shard(&k8s, None).is_err_and(|e| e.contains("--num-shards")));
        assert!(shard(&k8s, Some(3)).is_err());
        assert!(shard(&[], Some(3)).is_err());
        assert_eq!(shard(&[], None), Ok(None));
    }

    #[test]
    fn gpus_come_from_cuda_then_the_slurm_step_then_the_job() {
        // A machine without NVIDIA GPUs: every variable's integers are
        // the tool's indices.
        fn scheduler_gpus(env: Env<'_>) -> Option<(Vec<usize>, String)> {
            super::scheduler_gpus(env, &[])
                .expect("integers")
                .map(|g| (g.gpus, g.source))
        }
        let env = env_of(&[("SLURM_STEP_GPUS", "1,3"), ("SLURM_JOB_GPUS", "0,1,2,3")]);
        assert_eq!(
            scheduler_gpus(&env),
            Some((vec![1, 3], "SLURM_STEP_GPUS=1,3".into()))
        );
        let env = env_of(&[("CUDA_VISIBLE_DEVICES", "2"), ("SLURM_JOB_GPUS", "0,1")]);
        assert_eq!(
            scheduler_gpus(&env),
            Some((vec![2], "CUDA_VISIBLE_DEVICES=2".into()))
        );
        assert_eq!(scheduler_gpus(&env_of(&[])), None);
        let none = env_of(&[("CUDA_VISIBLE_DEVICES", ""), ("SLURM_JOB_GPUS", "0")]);
        assert_eq!(
            scheduler_gpus(&none),
            Some((vec![], "CUDA_VISIBLE_DEVICES=".into()))
        );
    }

    /// On a machine with NVIDIA GPUs, `CUDA_VISIBLE_DEVICES` counts them
    /// in CUDA's order (`CUDA_DEVICE_ORDER` honoured), not every GPU, and
    /// a UUID that names none is refused; Slurm's variables stay the tool's
    /// indices, and `CUDA_VISIBLE_DEVICES` still wins over them.
    #[test]
    fn cuda_visible_devices_is_read_over_nvidias_enumeration() {
        // gpu:0 is an integrated GPU; gpu:1 and gpu:2 NVIDIA's, the
        // second the faster.
        let nvidia = [
            NvidiaDevice {
                index: 1,
                uuid: "GPU-1111".into(),
                fastest_first: Some(1),
                mig: Vec::new(),
                mig_mode: false,
            },
            NvidiaDevice {
                index: 2,
                uuid: "GPU-2222".into(),
                fastest_first: Some(0),
                mig: Vec::new(),
                mig_mode: false,
            },
        ];
        let gpus = |pairs: &[(&str, &str)]| {
            scheduler_gpus(&env_of(pairs), &nvidia).map(|g| g.map(|g| g.gpus))
        };
        let cuda = ("CUDA_VISIBLE_DEVICES", "0");
        assert_eq!(gpus(&[cuda]), Ok(Some(vec![2])));
        let by_bus = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        assert_eq!(gpus(&[cuda, by_bus]), Ok(Some(vec![1])));
        assert_eq!(
            gpus(&[("CUDA_VISIBLE_DEVICES", "GPU-2"), ("SLURM_JOB_GPUS", "0")]),
            Ok(Some(vec![2]))
        );
        assert_eq!(gpus(&[("SLURM_JOB_GPUS", "0,1")]), Ok(Some(vec![0, 1])));
        let refused = gpus(&[("CUDA_VISIBLE_DEVICES", "GPU-3")]).expect_err("no such GPU");
        assert!(
            refused.starts_with("CUDA_VISIBLE_DEVICES=GPU-3: "),
            "{refused}"
        );
    }

    /// Without NVIDIA GPUs, `CUDA_VISIBLE_DEVICES`' integers stay the
    /// tool's indices (Slurm sets it on every vendor's nodes) and its list
    /// ends where CUDA's would, over every value of one to three entries
    /// of every kind in every position: at a negative index, an empty
    /// entry, a word (`NoDevFiles`, `none`, `void`, `all`) or an index
    /// named again, naming that entry; a UUID before the end names no GPU
    /// here and is refused in one line.
    #[test]
    fn without_nvidia_gpus_indices_are_gpu_n_up_to_where_cuda_stops() {
        let gpus = |value: &str| {
            scheduler_gpus(&env_of(&[("CUDA_VISIBLE_DEVICES", value)]), &[])
                .map(|g| g.expect("CUDA_VISIBLE_DEVICES is set"))
        };
        // (entry, the gpu:N it names, or None where the list ends there,
        // or refused).
        let entries: [(&str, Option<usize>, bool); 11] = [
            ("0", Some(0), false),
            ("1", Some(1), false),
            ("10000", Some(10000), false),
            ("-1", None, false),
            ("", None, false),
            ("NoDevFiles", None, false),
            ("none", None, false),
            ("void", None, false),
            ("all", None, false),
            ("GPU-1111", None, true),
            ("MIG-1111", None, true),
        ];
        let mut values: Vec<Vec<usize>> = Vec::new();
        for a in 0..entries.len() {
            values.push(vec![a]);
            for b in 0..entries.len() {
                values.push(vec![a, b]);
                for c in 0..entries.len() {
                    values.push(vec![a, b, c]);
                }
            }
        }
        for picks in &values {
            let written: Vec<&str> = picks.iter().map(|&i| entries[i].0).collect();
            let value = written.join(",");
            let (mut want, mut end, mut refused) = (Vec::new(), None, false);
            for (at, &i) in picks.iter().enumerate() {
                match entries[i] {
                    (_, _, true) => {
                        refused = true;
                        break;
                    }
                    (_, Some(n), _) if !want.contains(&n) => want.push(n),
                    (entry, _, _) => {
                        if !written[at..].iter().all(|e| e.is_empty()) {
                            end = Some(entry);
                        }
                        break;
                    }
                }
            }
            match gpus(&value) {
                Err(e) => assert!(
                    refused
                        && e.starts_with(&format!("CUDA_VISIBLE_DEVICES={value}: "))
                        && !e.contains('\n'),
                    "{value:?}: {e}"
                ),
                Ok(given) => {
                    assert!(!refused, "{value:?}: {given:?}");
                    assert_eq!(given.gpus, want, "{value:?}");
                    assert_eq!(given.ended.map(|e| e.entry).as_deref(), end, "{value:?}");
                }
            }
        }
        assert_eq!(gpus("1, 3").map(|g| g.gpus), Ok(vec![1, 3]));
        assert_eq!(gpus("0,-1,1").map(|g| g.gpus), Ok(vec![0]));
        // Slurm's own variables are left as they were.
        let slurm = env_of(&[("SLURM_JOB_GPUS", "0,x,2")]);
        assert_eq!(
            scheduler_gpus(&slurm, &[]).map(|g| g.map(|g| g.gpus)),
            Ok(Some(vec![0, 2]))
        );
    }

    /// A value CUDA reads as no GPU says so in one clause naming the
    /// entry that ended it, `all` with how to get every GPU; a value that
    /// is empty, or gives GPUs, has nothing to say.
    #[test]
    fn a_value_that_gives_no_gpu_says_which_entry_ended_it() {
        let why = |value: &str| {
            scheduler_gpus(&env_of(&[("CUDA_VISIBLE_DEVICES", value)]), &[])
                .expect("no UUID")
                .expect("set")
                .why_none()
        };
        assert_eq!(
            why("all").as_deref(),
            Some("CUDA_VISIBLE_DEVICES=all names no GPU to CUDA; unset it to use every GPU")
        );
        for (value, entry) in [
            ("NoDevFiles", "`NoDevFiles`"),
            ("none", "`none`"),
            ("void", "`void`"),
            ("-1", "`-1`"),
            (",0", "an empty entry"),
        ] {
            let why = why(value).unwrap_or_else(|| panic!("{value}"));
            assert!(
                why.starts_with(&format!(
                    "CUDA_VISIBLE_DEVICES={value} names no GPU: CUDA's list ends at {entry}"
                )) && !why.contains('\n'),
                "{why}"
            );
        }
        for quiet in ["", "0", "0,1,", "0,NoDevFiles"] {
            assert_eq!(why(quiet), None, "{quiet:?}");
        }
    }
}
