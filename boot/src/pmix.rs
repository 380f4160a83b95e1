//! PMIx, the interface of Open MPI's `mpirun` and Slurm's `srun --mpi=pmix`, through
//! the system's `libpmix` loaded at run time (so a binary runs where PMIx is absent).

mod ffi;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{check_rank_size, Backend, BootError};

pub(crate) struct Pmix {
    lib: &'static ffi::Lib,
    me: ffi::Proc,
    size: u32,
    local: Option<(u32, u32)>,
    timeout: Duration,
    finalized: bool,
}

impl Pmix {
    pub(crate) fn init(timeout: Duration) -> Result<Pmix, BootError> {
        let lib = ffi::lib()?;
        let me = lib.init()?;
        let mut s = Pmix {
            lib,
            me,
            size: 0,
            local: None,
            timeout,
            finalized: false,
        };
        // From here on a failure must still finalize: Drop does it.
        let job = ffi::proc_in(&me.nspace, ffi::PMIX_RANK_WILDCARD);
        s.size = lib
            .get_uint(&job, ffi::PMIX_JOB_SIZE, timeout)?
            .ok_or_else(|| BootError::Protocol("PMIx gave no job size".into()))?;
        check_rank_size(me.rank, s.size, "PMIx")?;
        let lrank = lib.get_uint(&me, ffi::PMIX_LOCAL_RANK, timeout)?;
        let lsize = lib.get_uint(&job, ffi::PMIX_LOCAL_SIZE, timeout)?;
        if let (Some(r), Some(n)) = (lrank, lsize) {
            if r < n && n <= s.size {
                s.local = Some((r, n));
            }
        }
        Ok(s)
    }
}

impl Backend for Pmix {
    fn rank(&self) -> u32 {
        self.me.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn local(&self) -> Option<(u32, u32)> {
        self.local
    }

    fn publish(&mut self, entries: &BTreeMap<String, Vec<u8>>) -> Result<(), BootError> {
        for (k, v) in entries {
            self.lib.put(&ffi::key(k), v)?;
        }
        self.lib.commit()
    }

    fn fence(&mut self) -> Result<(), BootError> {
        self.lib.fence(true, self.timeout)
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, BootError> {
        let who = ffi::proc_in(&self.me.nspace, rank);
        self.lib
            .get_bytes(&who, &ffi::key(key), self.timeout)?
            .ok_or_else(|| BootError::NotFound {
                rank,
                key: key.to_owned(),
            })
    }

    fn barrier(&mut self) -> Result<(), BootError> {
        self.lib.fence(false, self.timeout)
    }

    fn finalize(&mut self) -> Result<(), BootError> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        self.lib.finalize()
    }
}

impl Drop for Pmix {
    fn drop(&mut self) {
        // Covers a failed init after PMIx_Init succeeded; Boot finalizes otherwise.
        let _ = self.finalize();
    }
}
