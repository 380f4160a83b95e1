//! A SHMEM-style program over RDM endpoints, started by a launcher (`mpirun`, `srun`, or
//! `fabric-boot`'s TCP fallback): every rank registers a symmetric heap of the same size,
//! publishes its endpoint name and the heap's address and key through the bootstrap,
//! fences, and inserts every rank (itself included) into its AV. On that it builds a
//! small one-sided API ([`Pe`]): `put` (`fi_write`), `get` (`fi_read`), atomic fetch-add
//! and compare-swap on `u64` (`fi_fetch_atomic`, `fi_compare_atomic`), `quiet` (every
//! outstanding operation completed) and a dissemination `barrier` over tagged messages.
//! The bootstrap's own barrier is used only at teardown, when the fabric is done.
//!
//! The checks, each over every rank:
//!
//! * all-to-all: rank `w` puts a pattern (depending on the seed, `w`, the target and the
//!   offset) into its slot of every rank's heap, quiets and meets the others at a
//!   barrier; each rank then checks every byte of every slot, and reads back (`get`) what
//!   it wrote to every rank and checks that too;
//! * a counter on rank 0 that every rank fetch-adds `--iters` times: each fetched value
//!   is below the total, and everyone reads the total back;
//! * a lock on rank 0 taken with compare-swap: under it each rank does a non-atomic
//!   read-modify-write (get, put) of a shared word `--iters` times; the word ends equal
//!   to the number of increments only if the lock excluded everyone else.
//!
//! Each rank prints one line, `SHMEM rank=.. size=.. node=.. host=.. peers=.. bytes=..
//! ok=true`, and exits 0, or prints `ok=false` with the phase and the ranks that failed
//! it (`failed=3,5`), says what went wrong on stderr, and exits non-zero. Every wait
//! gives up when nothing happens for `-T` seconds, so a dead or stuck peer is an error
//! naming it, not a hang. The seed is printed (`seed=`) and replayed with `--seed` or
//! `FABRIC_SHMEM_SEED`.
//!
//! `--bench`: rank 0 measures, against the first other rank on its node and the first
//! rank on another node, the one-way latency of an 8-byte put that the peer sees and
//! answers with a put (`shmem_wait_until` style; half the round trip) and the rate of
//! a stream of 1 MiB puts, as medians over `--bench-rounds` rounds (`BENCH` lines).
//!
//! ```text
//! mpirun -n 8 --host node1:4,node2:4 -x FABRIC_TCP_IFACE=eth0 target/release/examples/shmem -p hybrid
//! srun -N 2 -n 8 --mpi=pmix --export=ALL,FABRIC_TCP_IFACE=eth0 target/release/examples/shmem -p tcp --bench
//! ```
//!
//! For failure tests, `--kill-rank R --kill-after-phase P` makes rank R kill itself with
//! `SIGKILL` at phase P (`setup`: the fabric is up and a barrier passed; `puts`: its
//! all-to-all puts are posted).

#[allow(dead_code)]
mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{getinfo_first, Call, Failure, Objects, Prov, Res};
use fabric::prelude::*;
use fabric_boot::Boot;
use fabric_shm::Shm;
use fabric_tcp::Tcp;

/// Heap offset of the fetch-add counter (used on rank 0).
const COUNTER_OFF: usize = 0;
/// Heap offset of the lock word (rank 0).
const LOCK_OFF: usize = 8;
/// Heap offset of the word incremented under the lock (rank 0).
const SHARED_OFF: usize = 16;
/// Heap offset of the benchmark's ping word (written by rank 0 into its peer's heap).
const PING_OFF: usize = 24;
/// Heap offset of the benchmark's pong word (written by the peer into rank 0's heap).
const PONG_OFF: usize = 32;
/// Bytes before the all-to-all slots.
const HDR: usize = 64;
/// The size of a put of the bandwidth stream.
const BW_SIZE: usize = 1 << 20;
/// The heap's requested key (domains without provider keys); the key actually used is
/// exchanged with the address either way.
const HEAP_KEY: u64 = 0x5e4d;
/// Tag bit of barrier messages (the epoch and round go in the low bits).
const BARRIER_TAG: u64 = 1 << 63;
/// Context of a barrier receive.
const BARRIER_CTX: usize = usize::MAX;
/// The environment variable that replays a seed (as `--seed` does).
const SEED_ENV: &str = "FABRIC_SHMEM_SEED";
/// The ping value that ends a benchmark peer's answering loop.
const PING_END: u64 = u64::MAX;
/// Empty polls in a row before a wait starts yielding the processor.
const SPIN_POLLS: u32 = 2048;
/// Idle time after which a wait sleeps between polls (ranks with nothing to do leave
/// the processors to those measuring).
const NAP_AFTER: Duration = Duration::from_millis(50);
/// The sleep between polls of a long wait.
const NAP: Duration = Duration::from_millis(1);

/// What each operation is, in the upper bits of its context (the peer in the lower).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Put = 1,
    Get = 2,
    FetchAdd = 3,
    CompareSwap = 4,
    Barrier = 5,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Put => "put",
            OpKind::Get => "get",
            OpKind::FetchAdd => "fetch-add",
            OpKind::CompareSwap => "compare-swap",
            OpKind::Barrier => "barrier message",
        }
    }

    fn from_bits(b: usize) -> Option<OpKind> {
        [
            OpKind::Put,
            OpKind::Get,
            OpKind::FetchAdd,
            OpKind::CompareSwap,
            OpKind::Barrier,
        ]
        .into_iter()
        .find(|k| *k as usize == b)
    }

    fn context(self, peer: usize) -> Context {
        Context(((self as usize) << 32) | peer)
    }
}

/// The phases `--kill-after-phase` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// Endpoint, heap and AV ready, and a fabric barrier passed.
    Setup,
    /// This rank's all-to-all puts posted, not yet quieted.
    Puts,
}

/// Command line.
#[derive(Parser, Debug)]
#[command(about = "SHMEM-style all-to-all, atomics and lock test over RDM endpoints")]
struct Args {
    /// provider: tcp|shm|hybrid (loopback cannot reach other processes)
    #[arg(short = 'p', value_name = "provider", default_value = "tcp")]
    provider: String,
    /// fail when a wait sees nothing happen for this many seconds
    #[arg(short = 'T', value_name = "seconds", default_value_t = 30)]
    timeout: u64,
    /// bytes each rank writes into every rank's heap
    #[arg(long, default_value_t = 64 << 10)]
    slot: usize,
    /// bytes per put of the all-to-all
    #[arg(long, default_value_t = 4 << 10)]
    chunk: usize,
    /// pattern seed (default: FABRIC_SHMEM_SEED, else chosen by rank 0; printed)
    #[arg(long)]
    seed: Option<u64>,
    /// fetch-adds and lock rounds per rank
    #[arg(long, default_value_t = 16)]
    iters: u64,
    /// measure latency and bandwidth from rank 0 to a same-node and another-node rank
    #[arg(long)]
    bench: bool,
    /// rounds of each measurement (the median is reported)
    #[arg(long, default_value_t = 5)]
    bench_rounds: usize,
    /// ping-pongs per latency round
    #[arg(long, default_value_t = 1000)]
    bench_iters: usize,
    /// 1 MiB puts per bandwidth round
    #[arg(long, default_value_t = 32)]
    bench_puts: usize,
    /// after a failure, serve the other ranks this many seconds (at most -T) before
    /// exiting, so that they see the failure's cause rather than this rank's exit
    #[arg(long, default_value_t = 2)]
    linger: u64,
    /// the rank that kills itself (SIGKILL) at --kill-after-phase
    #[arg(long, requires = "kill_after_phase")]
    kill_rank: Option<usize>,
    /// where --kill-rank dies
    #[arg(long, value_enum)]
    kill_after_phase: Option<Phase>,
}

/// A rank's heap as the others address it.
#[derive(Debug, Clone, Copy)]
struct Heap {
    addr: u64,
    key: u64,
    len: u64,
}

impl Heap {
    fn to_bytes(self) -> Vec<u8> {
        [self.addr, self.key, self.len]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    fn from_bytes(b: &[u8]) -> Option<Heap> {
        let w = |i: usize| {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        (b.len() == 24).then_some(())?;
        Some(Heap {
            addr: w(0)?,
            key: w(1)?,
            len: w(2)?,
        })
    }
}

/// A wait's pacing and deadline: spins, then yields, then naps; fails when nothing has
/// happened for the timeout.
struct Spin {
    timeout: Duration,
    last: Instant,
    empty: u32,
}

impl Spin {
    fn new(timeout: Duration) -> Spin {
        Spin {
            timeout,
            last: Instant::now(),
            empty: 0,
        }
    }

    /// Something happened: the deadline moves and the wait spins again.
    fn busy(&mut self) {
        self.last = Instant::now();
        self.empty = 0;
    }

    /// Nothing happened on this poll; `what` says what is awaited when the time is up.
    fn idle(&mut self, what: impl FnOnce() -> String) -> Res<()> {
        self.empty = self.empty.saturating_add(1);
        if self.empty < SPIN_POLLS {
            return Ok(());
        }
        let idle = self.last.elapsed();
        if idle >= self.timeout {
            return Err(Failure::new(
                Error::TimedOut,
                format!("{} (nothing for {:.1} s)", what(), idle.as_secs_f64()),
            ));
        }
        if idle >= NAP_AFTER {
            std::thread::sleep(NAP);
        } else {
            std::thread::yield_now();
        }
        Ok(())
    }
}

/// One processing element: this rank's endpoint and heap, and every rank's address.
struct Pe<'a, P: Provider> {
    o: &'a Objects<P>,
    /// This rank's heap; local accesses go through it, serialized with remote ones.
    mr: &'a MemoryRegion<'a, Stack<P>>,
    /// Destination of gets, fetches and barrier receives: owned by the caller and
    /// declared before the endpoint, so it outlives whatever is still posted.
    scratch: &'a mut [u8],
    rank: usize,
    size: usize,
    addrs: Vec<FiAddr>,
    heaps: Vec<Heap>,
    timeout: Duration,
    /// Operations posted and not completed, by target rank.
    pending: Vec<usize>,
    /// Operations that completed in error: (rank, what, error text).
    errors: Vec<(Option<usize>, String)>,
    barrier_epoch: u64,
    kill: Option<(usize, Phase)>,
}

impl<'a, P: Provider> Pe<'a, P> {
    /// Reads what the transmit CQ has, settling the pending counts; errors are kept.
    fn poll(&mut self) -> Res<usize> {
        let mut e = [CqTaggedEntry::default(); 16];
        let mut got = 0;
        loop {
            match self.o.txcq.read(&mut e) {
                Ok(n) => {
                    for c in &e[..n] {
                        self.settle(c.op_context);
                    }
                    got += n;
                    if n < e.len() {
                        return Ok(got);
                    }
                }
                Err(Error::Again) => return Ok(got),
                Err(Error::Avail) => {
                    let err = self.o.txcq.read_err().call("fi_cq_readerr")?;
                    let peer = self.settle(err.context);
                    let what = match (peer, OpKind::from_bits(err.context.0 >> 32)) {
                        (Some(p), Some(k)) => format!("{} on rank {p}", k.name()),
                        _ => "an injected 8-byte put (benchmark)".into(),
                    };
                    let text = format!(
                        "{what} failed: {} ({})",
                        err.err.as_str(),
                        self.o.txcq.strerror(&err)
                    );
                    self.errors.push((peer, text));
                    got += 1;
                }
                Err(e) => return Err(Failure::call("fi_cq_read", e)),
            }
        }
    }

    /// Marks the operation of context `ctx` done; its target rank, if it has one.
    fn settle(&mut self, ctx: Context) -> Option<usize> {
        OpKind::from_bits(ctx.0 >> 32)?;
        let peer = ctx.0 & 0xffff_ffff;
        let p = self.pending.get_mut(peer)?;
        *p = p.checked_sub(1)?;
        Some(peer)
    }

    /// The ranks that failed an operation so far.
    fn failed(&self) -> BTreeSet<usize> {
        self.errors.iter().filter_map(|(p, _)| *p).collect()
    }

    /// Posts with `post`, retrying while the queue is full (completions are read
    /// meanwhile, which makes room), and counts the operation as pending on `peer`.
    fn post(
        &mut self,
        name: &str,
        peer: usize,
        counted: bool,
        mut post: impl FnMut(&Objects<P>) -> fabric::Result<()>,
    ) -> Res<()> {
        let o = self.o;
        let mut spin = Spin::new(self.timeout);
        loop {
            match post(o) {
                Ok(()) => break,
                Err(Error::Again) => {
                    if self.poll()? > 0 {
                        spin.busy();
                    }
                    spin.idle(|| format!("{name} to rank {peer}: the transmit queue stays full"))?;
                }
                Err(e) => {
                    // A peer that is gone can fail the post itself (no route, refused).
                    let text = format!("{name} to rank {peer} failed: {}", e.as_str());
                    self.errors.push((Some(peer), text.clone()));
                    return Err(Failure::new(e, text));
                }
            }
        }
        if counted {
            self.pending[peer] += 1;
        }
        Ok(())
    }

    /// `shmem_putmem`: `data` into rank `pe`'s heap at `off` (complete after `quiet`).
    fn put(&mut self, pe: usize, off: usize, data: &[u8]) -> Res<()> {
        let (dest, h) = (self.addrs[pe], self.heaps[pe]);
        let ctx = OpKind::Put.context(pe);
        self.post("fi_write", pe, true, |o| {
            o.ep.write(data, dest, h.addr + off as u64, h.key, ctx)
        })
    }

    /// `shmem_getmem`: `len` bytes of rank `pe`'s heap at `off`, waited for.
    fn get(&mut self, pe: usize, off: usize, len: usize) -> Res<Vec<u8>> {
        let (src, h) = (self.addrs[pe], self.heaps[pe]);
        let ctx = OpKind::Get.context(pe);
        let buf = &mut self.scratch[..len];
        let (ptr, n) = (buf.as_mut_ptr(), buf.len());
        self.post("fi_read", pe, true, |o| {
            // SAFETY: `ptr..ptr+n` is in `scratch`, which the caller declared before the
            // endpoint (it outlives every posted operation) and which is not touched
            // again until `quiet` below has seen this read complete; a retry re-posts
            // the same unused range.
            unsafe {
                o.ep.read(
                    std::slice::from_raw_parts_mut(ptr, n),
                    src,
                    h.addr + off as u64,
                    h.key,
                    ctx,
                )
            }
        })?;
        self.quiet(&format!("get from rank {pe}"))?;
        Ok(self.scratch[..len].to_vec())
    }

    /// `shmem_atomic_fetch_add` on a `u64` of rank `pe`'s heap.
    fn fetch_add(&mut self, pe: usize, off: usize, add: u64) -> Res<u64> {
        self.amo(pe, off, OpKind::FetchAdd, add, 0)
    }

    /// `shmem_atomic_compare_swap` on a `u64` of rank `pe`'s heap: the old value.
    fn compare_swap(&mut self, pe: usize, off: usize, cmp: u64, new: u64) -> Res<u64> {
        self.amo(pe, off, OpKind::CompareSwap, new, cmp)
    }

    fn amo(&mut self, pe: usize, off: usize, kind: OpKind, operand: u64, cmp: u64) -> Res<u64> {
        let (dest, h) = (self.addrs[pe], self.heaps[pe]);
        let ctx = kind.context(pe);
        let (operand, cmp) = (operand.to_le_bytes(), cmp.to_le_bytes());
        let ptr = self.scratch[..8].as_mut_ptr();
        let addr = h.addr + off as u64;
        let name = match kind {
            OpKind::CompareSwap => "fi_compare_atomic",
            _ => "fi_fetch_atomic",
        };
        self.post(name, pe, true, |o| {
            // SAFETY: the result goes to the first 8 bytes of `scratch`, which outlives
            // the endpoint (see `get`) and is read only after `quiet` below has seen
            // this operation complete.
            let result = unsafe { std::slice::from_raw_parts_mut(ptr, 8) };
            match kind {
                // SAFETY: as above, for the result buffer.
                OpKind::CompareSwap => unsafe {
                    o.ep.compare_atomic(
                        &operand,
                        &cmp,
                        result,
                        Datatype::Uint64,
                        AtomicOp::Cswap,
                        dest,
                        addr,
                        h.key,
                        ctx,
                    )
                },
                // SAFETY: as above, for the result buffer.
                _ => unsafe {
                    o.ep.fetch_atomic(
                        &operand,
                        result,
                        Datatype::Uint64,
                        AtomicOp::Sum,
                        dest,
                        addr,
                        h.key,
                        ctx,
                    )
                },
            }
        })?;
        self.quiet(&format!("{} on rank {pe}", kind.name()))?;
        Ok(u64::from_le_bytes(self.scratch[..8].try_into().unwrap()))
    }

    /// `shmem_quiet`: waits until every operation posted has completed; an operation
    /// that failed (or a peer that never answers) is an error naming the ranks.
    fn quiet(&mut self, what: &str) -> Res<()> {
        let mut spin = Spin::new(self.timeout);
        while self.pending.iter().any(|&n| n > 0) {
            if self.poll()? > 0 {
                spin.busy();
                continue;
            }
            let waited = spin.idle(|| {
                let on: Vec<String> = self
                    .pending
                    .iter()
                    .enumerate()
                    .filter(|(_, &n)| n > 0)
                    .map(|(p, n)| format!("{n} on rank {p}"))
                    .collect();
                format!("{what}: operations still pending: {}", on.join(", "))
            });
            if let Err(f) = waited {
                for p in (0..self.size).filter(|&p| self.pending[p] > 0) {
                    self.errors.push((Some(p), f.msg.clone()));
                }
                return Err(f);
            }
        }
        self.check_errors(what)
    }

    /// Fails if an operation failed.
    fn check_errors(&self, what: &str) -> Res<()> {
        let Some((_, first)) = self.errors.first() else {
            return Ok(());
        };
        let failed: Vec<String> = self.failed().iter().map(|p| p.to_string()).collect();
        Err(Failure::new(
            Error::Io,
            format!(
                "{what}: {} operation(s) failed on rank(s) [{}]; first: {first}",
                self.errors.len(),
                failed.join(",")
            ),
        ))
    }

    /// `shmem_barrier_all`: quiet, then a dissemination barrier (round k: a message to
    /// rank + 2^k, one awaited from rank - 2^k) over tagged messages. Its own messages
    /// may still be in flight on return; the next quiet waits for them.
    fn barrier(&mut self) -> Res<()> {
        self.quiet("barrier")?;
        self.barrier_epoch += 1;
        let (mut dist, mut round) = (1usize, 0u64);
        while dist < self.size {
            let to = (self.rank + dist) % self.size;
            let from = (self.rank + self.size - dist) % self.size;
            let tag = BARRIER_TAG | (self.barrier_epoch << 8) | round;
            let o = self.o;
            let buf = self.scratch[..0].as_mut_ptr();
            // SAFETY: an empty receive buffer in `scratch`, which outlives the endpoint.
            unsafe {
                o.ep.trecv(
                    std::slice::from_raw_parts_mut(buf, 0),
                    FiAddr::UNSPEC,
                    tag,
                    0,
                    Context(BARRIER_CTX),
                )
            }
            .call("fi_trecv")?;
            let dest = self.addrs[to];
            // Sent with a completion (not injected) so that a failure names the rank;
            // the next quiet reaps it.
            let ctx = OpKind::Barrier.context(to);
            self.post("fi_tsend", to, true, |o| o.ep.tsend(&[], dest, tag, ctx))?;
            let mut spin = Spin::new(self.timeout);
            let mut e = [CqTaggedEntry::default(); 1];
            loop {
                match o.rxcq.read(&mut e) {
                    Ok(n) if n > 0 => break,
                    Ok(_) => {}
                    Err(Error::Again) => {}
                    Err(Error::Avail) => {
                        let err = o.rxcq.read_err().call("fi_cq_readerr")?;
                        let text = format!("barrier receive from rank {from} failed: {}", err.err);
                        self.errors.push((Some(from), text.clone()));
                        return Err(Failure::new(err.err, text));
                    }
                    Err(e) => return Err(Failure::call("fi_cq_read", e)),
                }
                if self.poll()? > 0 {
                    spin.busy();
                }
                self.check_errors("barrier")?;
                let epoch = self.barrier_epoch;
                if let Err(f) = spin
                    .idle(|| format!("barrier {epoch} round {round}: no message from rank {from}"))
                {
                    self.errors.push((Some(from), f.msg.clone()));
                    return Err(f);
                }
            }
            dist *= 2;
            round += 1;
        }
        Ok(())
    }

    /// A local read of this rank's heap.
    fn local(&self, off: usize, len: usize) -> Res<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.mr.read(off, &mut v).call("fi_mr read")?;
        Ok(v)
    }

    fn local_u64(&self, off: usize) -> Res<u64> {
        Ok(u64::from_le_bytes(self.local(off, 8)?.try_into().unwrap()))
    }

    /// Kills this process with `SIGKILL` if the command line says so for `phase`.
    fn maybe_die(&self, phase: Phase) {
        if self.kill == Some((self.rank, phase)) {
            say(&format!(
                "shmem: rank {} kills itself at phase {phase:?}",
                self.rank
            ));
            // If the signal could not be sent the run goes on, and the test that asked
            // for the kill sees every rank finish and fails.
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

/// What a run verified.
#[derive(Debug, Default)]
struct Tally {
    bytes: u64,
    fadds: u64,
    locks: u64,
}

/// A mismatch: the data arrived but is wrong.
fn mismatch(msg: String) -> Failure {
    Failure::new(Error::Io, format!("MISMATCH: {msg}"))
}

/// splitmix64's step, a fast well-mixed hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bytes rank `writer` puts into rank `target`'s heap: a function of the seed, both
/// ranks and the offset, so that data from the wrong rank, for the wrong rank or at the
/// wrong place is caught.
fn pattern(seed: u64, writer: usize, target: usize, len: usize) -> Vec<u8> {
    let base = mix(mix(seed ^ writer as u64) ^ ((target as u64) << 32));
    (0..len.div_ceil(8))
        .flat_map(|w| mix(base ^ w as u64).to_le_bytes())
        .take(len)
        .collect()
}

/// The first differing offset and how many bytes differ.
fn compare(got: &[u8], want: &[u8]) -> Option<(usize, usize)> {
    let first = got.iter().zip(want).position(|(a, b)| a != b)?;
    Some((first, got.iter().zip(want).filter(|(a, b)| a != b).count()))
}

/// Offset of rank `w`'s slot in every heap.
fn slot_off(w: usize, slot: usize) -> usize {
    HDR + w * slot
}

/// The checks of the module's documentation.
fn verify<P: Provider>(pe: &mut Pe<'_, P>, args: &Args, seed: u64, tally: &mut Tally) -> Res<()> {
    let (r, n, slot) = (pe.rank, pe.size, args.slot);
    // All-to-all, in rotated order so that not everyone starts with rank 0.
    for i in 0..n {
        let t = (r + i) % n;
        let data = pattern(seed, r, t, slot);
        for (c, piece) in data.chunks(args.chunk).enumerate() {
            pe.put(t, slot_off(r, slot) + c * args.chunk, piece)?;
        }
    }
    pe.maybe_die(Phase::Puts);
    pe.quiet("all-to-all puts")?;
    pe.barrier()?;
    for w in 0..n {
        let got = pe.local(slot_off(w, slot), slot)?;
        if let Some((at, bad)) = compare(&got, &pattern(seed, w, r, slot)) {
            return Err(mismatch(format!(
                "slot of rank {w} in rank {r}'s heap: {bad} bytes differ, first at {at}"
            )));
        }
        tally.bytes += slot as u64;
    }
    for i in 0..n {
        let t = (r + i) % n;
        let want = pattern(seed, r, t, slot);
        for (c, piece) in want.chunks(args.chunk).enumerate() {
            let got = pe.get(t, slot_off(r, slot) + c * args.chunk, piece.len())?;
            if let Some((at, bad)) = compare(&got, piece) {
                return Err(mismatch(format!(
                    "get of rank {r}'s slot from rank {t}: {bad} bytes differ, first at {}",
                    c * args.chunk + at
                )));
            }
        }
        tally.bytes += slot as u64;
    }

    // Fetch-add on rank 0's counter.
    let total = n as u64 * args.iters;
    let mut seen = BTreeSet::new();
    for _ in 0..args.iters {
        let old = pe.fetch_add(0, COUNTER_OFF, 1)?;
        if old >= total || !seen.insert(old) {
            return Err(mismatch(format!(
                "fetch-add on rank 0 returned {old} (total {total}, already seen: {})",
                seen.contains(&old)
            )));
        }
        tally.fadds += 1;
    }
    pe.barrier()?;
    let counter = u64::from_le_bytes(pe.get(0, COUNTER_OFF, 8)?.try_into().unwrap());
    if counter != total {
        return Err(mismatch(format!(
            "rank 0's counter is {counter} after {total} fetch-adds"
        )));
    }

    // A compare-swap lock on rank 0 guarding a non-atomic increment.
    let me = r as u64 + 1;
    for _ in 0..args.iters {
        let start = Instant::now();
        loop {
            let holder = pe.compare_swap(0, LOCK_OFF, 0, me)?;
            if holder == 0 {
                break;
            }
            if start.elapsed() >= pe.timeout {
                return Err(Failure::new(
                    Error::TimedOut,
                    format!(
                        "lock on rank 0 held by rank {} for {:.1} s",
                        holder - 1,
                        start.elapsed().as_secs_f64()
                    ),
                ));
            }
            std::thread::yield_now();
        }
        let v = u64::from_le_bytes(pe.get(0, SHARED_OFF, 8)?.try_into().unwrap());
        pe.put(0, SHARED_OFF, &(v + 1).to_le_bytes())?;
        pe.quiet("put under the lock")?;
        let was = pe.compare_swap(0, LOCK_OFF, me, 0)?;
        if was != me {
            return Err(mismatch(format!(
                "rank 0's lock word was {was} while rank {r} held it (as {me})"
            )));
        }
        tally.locks += 1;
    }
    pe.barrier()?;
    let shared = u64::from_le_bytes(pe.get(0, SHARED_OFF, 8)?.try_into().unwrap());
    if shared != total {
        return Err(mismatch(format!(
            "the word guarded by the lock is {shared} after {total} locked increments"
        )));
    }
    Ok(())
}

/// The median of `v` (sorted here).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Rank 0's side of the measurements against `peer`: (one-way latency in µs, MB/s),
/// each the median of the rounds.
fn bench_with<P: Provider>(pe: &mut Pe<'_, P>, args: &Args, peer: usize) -> Res<(f64, f64)> {
    let warmup = (args.bench_iters / 10).max(1);
    let mut lat = Vec::new();
    let mut seq = 0u64;
    for _ in 0..args.bench_rounds {
        let mut start = Instant::now();
        for i in 0..warmup + args.bench_iters {
            if i == warmup {
                start = Instant::now();
            }
            seq += 1;
            let (dest, h) = (pe.addrs[peer], pe.heaps[peer]);
            let bytes = seq.to_le_bytes();
            pe.post("fi_inject_write", peer, false, |o| {
                o.ep.inject_write(&bytes, dest, h.addr + PING_OFF as u64, h.key)
            })?;
            wait_word(pe, PONG_OFF, seq, || format!("pong {seq} from rank {peer}"))?;
        }
        let rtt = start.elapsed().as_secs_f64() / args.bench_iters as f64;
        lat.push(rtt / 2.0 * 1e6);
    }
    let mut bw = Vec::new();
    let data = vec![0x5au8; BW_SIZE];
    let off = slot_off(pe.size, args.slot);
    for _ in 0..args.bench_rounds {
        let start = Instant::now();
        for _ in 0..args.bench_puts {
            pe.put(peer, off, &data)?;
        }
        pe.quiet("bandwidth puts")?;
        let secs = start.elapsed().as_secs_f64();
        bw.push((args.bench_puts * BW_SIZE) as f64 / secs / 1e6);
    }
    let (dest, h) = (pe.addrs[peer], pe.heaps[peer]);
    let end = PING_END.to_le_bytes();
    pe.post("fi_inject_write", peer, false, |o| {
        o.ep.inject_write(&end, dest, h.addr + PING_OFF as u64, h.key)
    })?;
    Ok((median(&mut lat), median(&mut bw)))
}

/// Polls (running progress) until this rank's heap word at `off` is `want`.
fn wait_word<P: Provider>(
    pe: &mut Pe<'_, P>,
    off: usize,
    want: u64,
    what: impl Fn() -> String,
) -> Res<()> {
    let mut spin = Spin::new(pe.timeout);
    loop {
        pe.poll()?;
        pe.check_errors("benchmark")?;
        if pe.local_u64(off)? == want {
            return Ok(());
        }
        spin.idle(&what)?;
    }
}

/// A benchmark peer's side: answers every ping with a pong until the end mark.
fn bench_answer<P: Provider>(pe: &mut Pe<'_, P>) -> Res<()> {
    let mut spin = Spin::new(pe.timeout);
    let mut last = 0u64;
    loop {
        pe.poll()?;
        pe.check_errors("benchmark")?;
        let v = pe.local_u64(PING_OFF)?;
        if v == last {
            spin.idle(|| format!("benchmark: rank 0 stopped at ping {last}"))?;
            continue;
        }
        spin.busy();
        if v == PING_END {
            return Ok(());
        }
        last = v;
        let (dest, h) = (pe.addrs[0], pe.heaps[0]);
        let bytes = v.to_le_bytes();
        pe.post("fi_inject_write", 0, false, |o| {
            o.ep.inject_write(&bytes, dest, h.addr + PONG_OFF as u64, h.key)
        })?;
    }
}

/// After a failure, keeps serving the others (their operations on this heap need this
/// rank's progress) for `how_long`, so that they too run into the failure's cause
/// instead of into this rank's exit.
fn linger<P: Provider>(pe: &mut Pe<'_, P>, how_long: Duration) {
    let start = Instant::now();
    while start.elapsed() < how_long {
        if pe.poll().is_err() {
            break;
        }
        std::thread::sleep(NAP);
    }
}

/// This process's node: the network namespace it is in (the entry of /run/netns that
/// is the same namespace, as `ip netns identify` finds it), or `root`.
fn netns() -> String {
    let Ok(me) = std::fs::metadata("/proc/self/ns/net") else {
        return "unknown".into();
    };
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return "root".into();
    };
    dir.filter_map(|e| e.ok())
        .find(|e| {
            e.metadata()
                .is_ok_and(|m| (m.dev(), m.ino()) == (me.dev(), me.ino()))
        })
        .map_or("root".into(), |e| {
            e.file_name().to_string_lossy().into_owned()
        })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

fn boot_err(e: fabric_boot::BootError) -> Failure {
    Failure::new(Error::Io, format!("bootstrap: {e}"))
}

/// The whole run on provider `P`.
fn job<P: Provider>(args: &Args) -> Res<()> {
    let mut boot = Boot::init().map_err(boot_err)?;
    let (rank, size) = (boot.rank() as usize, boot.size() as usize);
    if args.slot == 0 || args.chunk == 0 {
        return Err(Failure::usage("--slot and --chunk must be positive"));
    }
    let hints = Hints::new()
        .caps(Caps::TAGGED | Caps::RMA | Caps::ATOMIC)
        .ep_type(EpType::Rdm)
        .prov_name(P::NAME);
    let info = getinfo_first::<P>(&hints)?;
    let biggest = if args.bench { BW_SIZE } else { args.chunk };
    if biggest > info.ep_attr.max_msg_size {
        return Err(Failure::usage(format!(
            "puts of {biggest} bytes exceed the provider's largest message ({})",
            info.ep_attr.max_msg_size
        )));
    }
    let heap_len = slot_off(size, args.slot) + if args.bench { BW_SIZE } else { 0 };
    // Buffers before the objects: the endpoint, dropped first, cancels what is posted.
    let mut heap = vec![0u8; heap_len];
    let mut scratch = vec![0u8; args.chunk.max(8)];
    let o = Objects::<P>::open(&info)?;
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        requested_key: HEAP_KEY,
        ..MrAttr::DEFAULT
    };
    let mr = o.domain.mr_reg(&mut heap, &attr).call("fi_mr_reg")?;
    let mine = Heap {
        addr: mr.remote_addr(),
        key: mr.key(),
        len: heap_len as u64,
    };
    let host = hostname();
    let from_env = match std::env::var(SEED_ENV) {
        Ok(v) => Some(v.trim().parse::<u64>().map_err(|_| {
            Failure::usage(format!("{SEED_ENV}={v:?} is not a 64-bit unsigned number"))
        })?),
        Err(_) => None,
    };
    let chosen_seed = args.seed.or(from_env).unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        mix(t.as_nanos() as u64 ^ u64::from(std::process::id()))
    });
    boot.put("ep", &o.ep.name()).map_err(boot_err)?;
    boot.put("heap", &mine.to_bytes()).map_err(boot_err)?;
    boot.put("host", host.as_bytes()).map_err(boot_err)?;
    if rank == 0 {
        boot.put("seed", &chosen_seed.to_le_bytes())
            .map_err(boot_err)?;
    }
    boot.commit().map_err(boot_err)?;
    boot.fence().map_err(boot_err)?;
    let mut addrs = Vec::with_capacity(size);
    let mut heaps = Vec::with_capacity(size);
    let mut hosts = Vec::with_capacity(size);
    for p in 0..size as u32 {
        let name = boot.get(p, "ep").map_err(boot_err)?;
        addrs.push(o.av.insert(&name).call("fi_av_insert")?);
        let raw = boot.get(p, "heap").map_err(boot_err)?;
        let h = Heap::from_bytes(&raw)
            .ok_or_else(|| Failure::new(Error::Io, format!("rank {p}: a bad heap record")))?;
        if h.len != mine.len {
            return Err(Failure::new(
                Error::Inval,
                format!(
                    "rank {p}'s heap is {} bytes, this one {}: not symmetric",
                    h.len, mine.len
                ),
            ));
        }
        heaps.push(h);
        hosts.push(String::from_utf8_lossy(&boot.get(p, "host").map_err(boot_err)?).into_owned());
    }
    let seed_bytes = boot.get(0, "seed").map_err(boot_err)?;
    let seed = u64::from_le_bytes(
        seed_bytes
            .try_into()
            .map_err(|_| Failure::new(Error::Io, "rank 0's seed is not 8 bytes"))?,
    );
    let mut pe = Pe {
        o: &o,
        mr: &mr,
        scratch: &mut scratch,
        rank,
        size,
        addrs,
        heaps,
        timeout: Duration::from_secs(args.timeout),
        pending: vec![0; size],
        errors: Vec::new(),
        barrier_epoch: 0,
        kill: args.kill_rank.zip(args.kill_after_phase),
    };
    let local = match (boot.local_rank(), boot.local_size()) {
        (Some(r), Some(n)) => format!("{r}/{n}"),
        _ => "unknown".into(),
    };
    let head = format!(
        "SHMEM rank={rank} size={size} node={} host={host} local={local} boot={} provider={} \
         prov_name={} peers={size} seed={seed}",
        netns(),
        boot.kind().to_string().replace(' ', "-"),
        args.provider.to_ascii_lowercase(),
        P::NAME
    );
    let mut tally = Tally::default();
    let mut phase = "setup";
    let run = (|| {
        pe.barrier()?;
        pe.maybe_die(Phase::Setup);
        phase = "verify";
        verify(&mut pe, args, seed, &mut tally)?;
        if args.bench {
            phase = "bench";
            pe.barrier()?;
            let same = (1..size).find(|&p| hosts[p] == hosts[0]);
            let other = (1..size).find(|&p| hosts[p] != hosts[0]);
            if rank == 0 {
                for (peer, place) in [(same, "same-node"), (other, "other-node")] {
                    let Some(peer) = peer else {
                        println!("BENCH where={place} skipped=no-such-rank");
                        continue;
                    };
                    let (lat, bw) = bench_with(&mut pe, args, peer)?;
                    println!(
                        "BENCH pair=0-{peer} where={place} provider={} lat_us={lat:.2} \
                         bw_MBps={bw:.1} rounds={} iters={} puts={}x1MiB",
                        P::NAME,
                        args.bench_rounds,
                        args.bench_iters,
                        args.bench_puts
                    );
                }
            } else if Some(rank) == same || Some(rank) == other {
                bench_answer(&mut pe)?;
            }
        }
        phase = "final barrier";
        pe.barrier()
    })();
    match run {
        Ok(()) => {
            println!(
                "{head} bytes={} fadd={} lock={} ok=true",
                tally.bytes, tally.fadds, tally.locks
            );
            drop(pe);
            boot.barrier().map_err(boot_err)?;
            boot.finalize().map_err(boot_err)
        }
        Err(f) => {
            let linger_for = Duration::from_secs(args.linger).min(pe.timeout);
            linger(&mut pe, linger_for);
            let failed: Vec<String> = pe.failed().iter().map(|p| p.to_string()).collect();
            println!(
                "{head} bytes={} fadd={} lock={} ok=false phase={} failed={}",
                tally.bytes,
                tally.fadds,
                tally.locks,
                phase.replace(' ', "-"),
                if failed.is_empty() {
                    "none".into()
                } else {
                    failed.join(",")
                }
            );
            Err(Failure {
                code: f.code,
                msg: format!("rank {rank}: {}", f.msg),
            })
        }
    }
}

/// Writes `line` to stderr in one piece: a launcher merging the ranks' streams then
/// cannot cut it with another rank's output.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = Prov::parse(&args.provider).and_then(|prov| match prov {
        Prov::Tcp => job::<Tcp>(&args),
        Prov::Shm => job::<Shm>(&args),
        Prov::Hybrid => job::<fabric_hybrid::ShmTcp>(&args),
        Prov::Loopback => Err(Failure::new(
            Error::NotSupported,
            "-p loopback: its endpoints reach only their own process; use -p hybrid, tcp or shm",
        )),
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            say(&format!("shmem: {}", f.msg));
            ExitCode::from(f.exit_code())
        }
    }
}
