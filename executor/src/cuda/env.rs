//! The multi-process launch environment (torchrun or Slurm), parsed by a pure function, and the
//! TCP rendezvous that hands NCCL unique ids from rank 0 to the other ranks.
//!
//! torchrun sets `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`. Under Slurm
//! (`srun`), `SLURM_PROCID`, `SLURM_NTASKS` and `SLURM_LOCALID` give the same facts; the batch
//! script exports `MASTER_ADDR` and `MASTER_PORT` (see docs/executor-cuda.md). torchrun's
//! variables win when both are present. A world of one process is a single-process run.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Who launched the processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    Torchrun,
    Slurm,
}

/// One process's place in a multi-process run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    pub launcher: Launcher,
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub master_addr: String,
    pub master_port: u16,
}

fn required(get: &dyn Fn(&str) -> Option<String>, name: &str, why: &str) -> Result<String, String> {
    match get(name) {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        Some(_) => Err(format!("environment variable {name} is empty; {why}")),
        None => Err(format!("environment variable {name} is missing; {why}")),
    }
}

fn number<T: std::str::FromStr>(name: &str, value: &str, what: &str) -> Result<T, String> {
    value
        .parse::<T>()
        .map_err(|_| format!("environment variable {name}='{value}' is not {what}"))
}

/// Reads the launch environment through `get` (pass `|k| std::env::var(k).ok()`).
/// `Ok(None)`: a single-process run. Every missing or malformed variable is named.
pub fn parse_dist_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<DistEnv>, String> {
    let (launcher, world_var, rank_var, local_var) = if get("WORLD_SIZE").is_some() {
        (Launcher::Torchrun, "WORLD_SIZE", "RANK", "LOCAL_RANK")
    } else if get("SLURM_NTASKS").is_some() {
        (
            Launcher::Slurm,
            "SLURM_NTASKS",
            "SLURM_PROCID",
            "SLURM_LOCALID",
        )
    } else {
        return Ok(None);
    };
    let why = match launcher {
        Launcher::Torchrun => format!(
            "{world_var} is set, so this is a multi-process run; torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT"
        ),
        Launcher::Slurm => format!(
            "{world_var} is set, so this is a Slurm multi-process run; srun sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID, and the batch script must export MASTER_ADDR and MASTER_PORT"
        ),
    };
    let world: u32 = number(
        world_var,
        &required(get, world_var, &why)?,
        "a whole number of processes",
    )?;
    if world == 0 {
        return Err(format!(
            "environment variable {world_var}=0: a run needs at least one process"
        ));
    }
    if world == 1 {
        return Ok(None);
    }
    let rank: u32 = number(
        rank_var,
        &required(get, rank_var, &why)?,
        "a whole-number rank",
    )?;
    if rank >= world {
        return Err(format!(
            "environment variable {rank_var}={rank} is out of range: {world_var}={world} allows 0..{}",
            world - 1
        ));
    }
    let local_rank: u32 = number(
        local_var,
        &required(get, local_var, &why)?,
        "a whole-number GPU index",
    )?;
    let master_addr = required(get, "MASTER_ADDR", &why)?;
    let master_port: u16 = number(
        "MASTER_PORT",
        &required(get, "MASTER_PORT", &why)?,
        "a TCP port (1..65535)",
    )?;
    if master_port == 0 {
        return Err(
            "environment variable MASTER_PORT=0 is not a usable TCP port (1..65535)".into(),
        );
    }
    Ok(Some(DistEnv {
        launcher,
        rank,
        world_size: world,
        local_rank,
        master_addr,
        master_port,
    }))
}

const MAGIC: &[u8; 8] = b"PPLANID1";

/// Rank 0 sends `payload` (NCCL unique ids) to every other rank over TCP on `MASTER_PORT`;
/// other ranks connect to `MASTER_ADDR:MASTER_PORT` (retrying until `timeout`) and return it.
/// The frame is the magic `PPLANID1`, a u32 little-endian length, then the bytes.
pub fn rendezvous(env: &DistEnv, payload: &[u8], timeout: Duration) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + timeout;
    if env.rank == 0 {
        let listener = TcpListener::bind(("0.0.0.0", env.master_port)).map_err(|e| {
            format!(
                "rank 0 cannot listen on port MASTER_PORT={}: {e}",
                env.master_port
            )
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("rendezvous listener: {e}"))?;
        let mut served = 0;
        while served + 1 < env.world_size {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(|e| e.to_string())?;
                    let mut frame = MAGIC.to_vec();
                    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    frame.extend_from_slice(payload);
                    s.write_all(&frame)
                        .map_err(|e| format!("rendezvous: sending the NCCL ids failed: {e}"))?;
                    served += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "rendezvous: only {served} of {} ranks connected to port {} within {} s",
                            env.world_size - 1,
                            env.master_port,
                            timeout.as_secs()
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(format!("rendezvous accept: {e}")),
            }
        }
        Ok(payload.to_vec())
    } else {
        let addr = (env.master_addr.as_str(), env.master_port)
            .to_socket_addrs()
            .map_err(|e| format!("MASTER_ADDR='{}' does not resolve: {e}", env.master_addr))?
            .next()
            .ok_or_else(|| format!("MASTER_ADDR='{}' resolves to no address", env.master_addr))?;
        let mut stream = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(e) => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "rank {} could not reach rank 0 at {}:{} within {} s: {e}",
                            env.rank,
                            env.master_addr,
                            env.master_port,
                            timeout.as_secs()
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let mut head = [0u8; 12];
        stream
            .read_exact(&mut head)
            .map_err(|e| format!("rendezvous: reading from rank 0 failed: {e}"))?;
        if &head[..8] != MAGIC {
            return Err(format!(
                "rendezvous: {}:{} answered with something that is not a pplan rendezvous",
                env.master_addr, env.master_port
            ));
        }
        let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
        let mut body = vec![0u8; len];
        stream
            .read_exact(&mut body)
            .map_err(|e| format!("rendezvous: reading the NCCL ids failed: {e}"))?;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check(vars: &[(&str, &str)]) -> Result<Option<DistEnv>, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_dist_env(&|k: &str| map.get(k).cloned())
    }

    const TORCHRUN: [(&str, &str); 5] = [
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ];

    #[test]
    fn no_launcher_or_one_process_is_a_single_process_run() {
        assert_eq!(check(&[]), Ok(None));
        assert_eq!(check(&[("WORLD_SIZE", "1")]), Ok(None));
        assert_eq!(
            check(&[("SLURM_NTASKS", "1"), ("SLURM_PROCID", "0")]),
            Ok(None)
        );
    }

    #[test]
    fn torchrun_and_slurm_are_read() {
        let e = check(&TORCHRUN).unwrap().unwrap();
        assert_eq!(
            e,
            DistEnv {
                launcher: Launcher::Torchrun,
                rank: 1,
                world_size: 4,
                local_rank: 1,
                master_addr: "node0".into(),
                master_port: 29500
            }
        );
        let e = check(&[
            ("SLURM_PROCID", "9"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_LOCALID", "1"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "6000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(e.launcher, Launcher::Slurm);
        assert_eq!((e.rank, e.world_size, e.local_rank), (9, 16, 1));
    }

    #[test]
    fn every_missing_variable_is_named() {
        for skip in ["RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"] {
            let vars: Vec<_> = TORCHRUN
                .iter()
                .copied()
                .filter(|(k, _)| *k != skip)
                .collect();
            let err = check(&vars).unwrap_err();
            assert!(
                err.contains(skip) && err.contains("missing"),
                "{skip}: {err}"
            );
        }
        let err = check(&[("SLURM_NTASKS", "2"), ("SLURM_LOCALID", "0")]).unwrap_err();
        assert!(err.contains("SLURM_PROCID"), "{err}");
    }

    #[test]
    fn every_malformed_variable_is_named() {
        for (var, bad) in [
            ("RANK", "one"),
            ("WORLD_SIZE", "-2"),
            ("LOCAL_RANK", "x"),
            ("MASTER_PORT", "70000"),
            ("MASTER_PORT", "0"),
            ("RANK", "4"),
            ("MASTER_ADDR", " "),
            ("WORLD_SIZE", "0"),
        ] {
            let vars: Vec<_> = TORCHRUN
                .iter()
                .map(|&(k, v)| if k == var { (k, bad) } else { (k, v) })
                .collect();
            let err = check(&vars).unwrap_err();
            assert!(err.contains(var), "{var}={bad}: {err}");
        }
    }

    #[test]
    fn rendezvous_hands_the_payload_to_every_rank() {
        // A free port: bind to 0, read it back, release it.
        let port = TcpListener::bind(("127.0.0.1", 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let env = |rank| DistEnv {
            launcher: Launcher::Torchrun,
            rank,
            world_size: 3,
            local_rank: rank,
            master_addr: "127.0.0.1".into(),
            master_port: port,
        };
        let payload: Vec<u8> = (0..=255u8).collect();
        let t = Duration::from_secs(30);
        let clients: Vec<_> = (1..3)
            .map(|r| {
                let e = env(r);
                std::thread::spawn(move || rendezvous(&e, &[], t))
            })
            .collect();
        assert_eq!(rendezvous(&env(0), &payload, t).unwrap(), payload);
        for c in clients {
            assert_eq!(c.join().unwrap().unwrap(), payload);
        }
    }
}
