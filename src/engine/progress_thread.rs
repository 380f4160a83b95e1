//! The progress thread of [`Auto`](crate::Auto) progress.
#![allow(unsafe_code)]

use std::sync::Weak;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::Result;

use super::{DomainInner, AUTO_IDLE};

struct SendWeak<S: Config>(Weak<DomainInner<S>>);

// SAFETY: a progress thread is only spawned for `Auto` stacks, whose lock family is
// `Locked` (see `Progress::Locks` for `Auto`): every piece of mutable state reachable
// from a domain is behind a mutex or an atomic, the provider's transport and peer types
// are `Send + Sync` by the `Provider`/`Transport` bounds, and CQ entries are `Send`.
// The generic code cannot name that fact as a bound, hence this assertion.
unsafe impl<S: Config> Send for SendWeak<S> {}

/// How long an idle progress thread keeps polling after its last work before it
/// sleeps on the doorbell.
const AUTO_SPIN: Duration = Duration::from_micros(50);

/// Spawns the thread; it exits by itself once the domain is gone.
pub(crate) fn spawn<S: Config>(domain: Weak<DomainInner<S>>) -> Result<()> {
    let w = SendWeak(domain);
    std::thread::Builder::new()
        .name("fabric-progress".into())
        .spawn(move || {
            let w = w;
            let mut last_work = Instant::now();
            loop {
                let Some(d) = w.0.upgrade() else { break };
                let token = d.shared.doorbell.prepare();
                let n = d.progress();
                if n != 0 || d.has_triggers() {
                    last_work = Instant::now();
                } else if last_work.elapsed() < AUTO_SPIN {
                    // Traffic tends to come in bursts, and a peer in another process
                    // cannot ring our doorbell: keep polling a little before sleeping.
                    drop(token);
                    std::hint::spin_loop();
                } else {
                    // Armed, peers in other processes ring the doorbell too; one more
                    // pass sees what they sent before.
                    d.arm_doorbell();
                    if d.progress() != 0 {
                        last_work = Instant::now();
                        continue;
                    }
                    let _ = d.shared.doorbell.wait(token, Some(AUTO_IDLE));
                }
            }
        })
        .map(|_| ())
        .map_err(|_| crate::Error::NoMem)
}
