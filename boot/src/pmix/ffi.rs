//! The PMIx C interface: the few types and functions used, loaded from the system's
//! `libpmix` at run time, behind safe functions. The layouts are checked against the
//! installed `pmix_common.h` by this module's test.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;
use std::sync::OnceLock;
use std::time::Duration;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

use crate::BootError;

pub(crate) const PMIX_MAX_NSLEN: usize = 255;
pub(crate) const PMIX_MAX_KEYLEN: usize = 511;
pub(crate) const PMIX_SUCCESS: c_int = 0;
pub(crate) const PMIX_ERR_NOT_FOUND: c_int = -46;
pub(crate) const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
pub(crate) const PMIX_GLOBAL: u8 = 3;
pub(crate) const PMIX_BOOL: u16 = 1;
pub(crate) const PMIX_INT: u16 = 6;
pub(crate) const PMIX_UINT16: u16 = 13;
pub(crate) const PMIX_UINT32: u16 = 14;
pub(crate) const PMIX_BYTE_OBJECT: u16 = 27;
pub(crate) const PMIX_COLLECT_DATA: &CStr = c"pmix.collect";
pub(crate) const PMIX_TIMEOUT: &CStr = c"pmix.timeout";
pub(crate) const PMIX_OPTIONAL: &CStr = c"pmix.optional";
pub(crate) const PMIX_JOB_SIZE: &CStr = c"pmix.job.size";
pub(crate) const PMIX_LOCAL_RANK: &CStr = c"pmix.lrank";
pub(crate) const PMIX_LOCAL_SIZE: &CStr = c"pmix.local.size";

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Proc {
    pub(crate) nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub(crate) rank: u32,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ByteObject {
    pub(crate) bytes: *mut c_char,
    pub(crate) size: usize,
}

/// `pmix_value_t`'s union: the members used here, and the size of its largest member
/// (`pmix_envar_t`: two pointers and a char).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union ValueData {
    pub(crate) flag: bool,
    pub(crate) integer: c_int,
    pub(crate) uint16: u16,
    pub(crate) uint32: u32,
    pub(crate) bo: ByteObject,
    pub(crate) _largest: [u64; 3],
}

/// `pmix_value_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Value {
    pub(crate) type_: u16,
    pub(crate) data: ValueData,
}

/// `pmix_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Info {
    pub(crate) key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub(crate) flags: u32,
    pub(crate) value: Value,
}

impl Info {
    fn new(key: &CStr, value: Value) -> Info {
        let mut k = [0 as c_char; PMIX_MAX_KEYLEN + 1];
        for (d, s) in k.iter_mut().zip(key.to_bytes()) {
            *d = *s as c_char;
        }
        Info {
            key: k,
            flags: 0,
            value,
        }
    }

    fn flag(key: &CStr, on: bool) -> Info {
        Info::new(
            key,
            Value {
                type_: PMIX_BOOL,
                data: ValueData { flag: on },
            },
        )
    }

    fn int(key: &CStr, v: c_int) -> Info {
        Info::new(
            key,
            Value {
                type_: PMIX_INT,
                data: ValueData { integer: v },
            },
        )
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type DestructFn = unsafe extern "C" fn(*mut Value);
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The loaded library's entry points. The library is never unloaded: PMIx leaves a
/// progress thread behind, so these pointers stay valid for the life of the process.
pub(crate) struct Lib {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    destruct: DestructFn,
    error_string: ErrorStringFn,
}

/// Where the library is looked for: `FABRIC_BOOT_PMIX_LIB` if set, then the soname
/// (the loader's search path), then Debian's paths.
fn candidates() -> Vec<String> {
    let mut c = Vec::new();
    if let Ok(p) = std::env::var("FABRIC_BOOT_PMIX_LIB") {
        c.push(p);
    }
    c.extend(
        [
            "libpmix.so.2",
            "/usr/lib/x86_64-linux-gnu/libpmix.so.2",
            "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2",
            "/usr/lib/aarch64-linux-gnu/libpmix.so.2",
            "libpmix.so",
        ]
        .map(String::from),
    );
    c
}

fn load() -> Result<Lib, String> {
    let mut tried = Vec::new();
    for path in candidates() {
        // SAFETY: loading runs the library's initializers; libpmix's only set up its
        // own globals. RTLD_GLOBAL lets the plugins PMIx itself loads find its symbols.
        match unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_GLOBAL) } {
            Ok(lib) => {
                let lib: &'static Library = Box::leak(Box::new(lib));
                return resolve(lib).map_err(|e| format!("{path}: {e}"));
            }
            Err(e) => tried.push(format!("{path}: {e}")),
        }
    }
    Err(format!(
        "cannot load libpmix (install libpmix2, or set FABRIC_BOOT_PMIX_LIB): {}",
        tried.join("; ")
    ))
}

fn resolve(lib: &'static Library) -> Result<Lib, libloading::Error> {
    // SAFETY: each symbol is read with the type of its declaration in PMIx 4's pmix.h
    // (the same since PMIx 2); the library is leaked, so the pointers never dangle.
    unsafe {
        Ok(Lib {
            init: *lib.get::<InitFn>(b"PMIx_Init\0")?,
            finalize: *lib.get::<FinalizeFn>(b"PMIx_Finalize\0")?,
            put: *lib.get::<PutFn>(b"PMIx_Put\0")?,
            commit: *lib.get::<CommitFn>(b"PMIx_Commit\0")?,
            fence: *lib.get::<FenceFn>(b"PMIx_Fence\0")?,
            get: *lib.get::<GetFn>(b"PMIx_Get\0")?,
            destruct: *lib.get::<DestructFn>(b"PMIx_Value_destruct\0")?,
            error_string: *lib.get::<ErrorStringFn>(b"PMIx_Error_string\0")?,
        })
    }
}

/// The library, loaded on first use.
pub(crate) fn lib() -> Result<&'static Lib, BootError> {
    static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(load)
        .as_ref()
        .map_err(|e| BootError::Library(e.clone()))
}

/// A value returned by PMIx_Get, released with PMIx's own destructor.
struct Owned<'a> {
    lib: &'a Lib,
    v: *mut Value,
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: `v` came from a successful PMIx_Get, which allocates it with malloc
        // and hands ownership to the caller; PMIX_VALUE_RELEASE is exactly destruct
        // then free, and this is the only release.
        unsafe {
            (self.lib.destruct)(self.v);
            libc::free(self.v.cast());
        }
    }
}

fn timeout_secs(t: Duration) -> c_int {
    // PMIx counts whole seconds and reads 0 as "forever": round up.
    c_int::try_from(t.as_secs() + u64::from(t.subsec_nanos() > 0))
        .unwrap_or(c_int::MAX)
        .max(1)
}

impl Lib {
    fn check(&self, call: &'static str, status: c_int) -> Result<(), BootError> {
        if status == PMIX_SUCCESS {
            return Ok(());
        }
        // SAFETY: PMIx_Error_string returns a static string (or NULL) for any status.
        let p = unsafe { (self.error_string)(status) };
        let text = if p.is_null() {
            "unknown status".to_owned()
        } else {
            // SAFETY: a non-NULL result is a NUL-terminated static string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(BootError::Pmix { call, status, text })
    }

    /// PMIx_Init: this process's namespace and rank.
    pub(crate) fn init(&self) -> Result<Proc, BootError> {
        let mut me = Proc {
            nspace: [0; PMIX_MAX_NSLEN + 1],
            rank: 0,
        };
        // SAFETY: `me` is a valid pmix_proc_t to fill; no info array.
        let st = unsafe { (self.init)(&mut me, ptr::null_mut(), 0) };
        self.check("PMIx_Init", st)?;
        // The namespace is NUL-terminated within its array by PMIx's strncpy into a
        // zeroed buffer of NSLEN+1; keep the last byte zero whatever happened.
        me.nspace[PMIX_MAX_NSLEN] = 0;
        Ok(me)
    }

    /// PMIx_Finalize.
    pub(crate) fn finalize(&self) -> Result<(), BootError> {
        // SAFETY: no info array; called once per successful init by the backend.
        let st = unsafe { (self.finalize)(ptr::null(), 0) };
        self.check("PMIx_Finalize", st)
    }

    /// PMIx_Put of a byte object, global scope.
    pub(crate) fn put(&self, key: &CStr, bytes: &[u8]) -> Result<(), BootError> {
        let mut v = Value {
            type_: PMIX_BYTE_OBJECT,
            data: ValueData {
                bo: ByteObject {
                    bytes: bytes.as_ptr().cast_mut().cast(),
                    size: bytes.len(),
                },
            },
        };
        // SAFETY: PMIx_Put copies the value (pmix_value_xfer) before returning and
        // never writes through the byte pointer; `key` is NUL-terminated and shorter
        // than PMIX_MAX_KEYLEN (the caller's keys are checked).
        let st = unsafe { (self.put)(PMIX_GLOBAL, key.as_ptr(), &mut v) };
        self.check("PMIx_Put", st)
    }

    /// PMIx_Commit.
    pub(crate) fn commit(&self) -> Result<(), BootError> {
        // SAFETY: no arguments.
        let st = unsafe { (self.commit)() };
        self.check("PMIx_Commit", st)
    }

    /// PMIx_Fence over the whole namespace, collecting everyone's data if `collect`.
    pub(crate) fn fence(&self, collect: bool, timeout: Duration) -> Result<(), BootError> {
        let info = [
            Info::flag(PMIX_COLLECT_DATA, collect),
            Info::int(PMIX_TIMEOUT, timeout_secs(timeout)),
        ];
        // SAFETY: NULL procs means "all of my namespace"; `info` outlives the call.
        let st = unsafe { (self.fence)(ptr::null(), 0, info.as_ptr(), info.len()) };
        self.check("PMIx_Fence", st)
    }

    /// PMIx_Get: `Ok(None)` when PMIx reports the key absent. With `local_only`
    /// (PMIX_OPTIONAL) PMIx looks only in what this process already holds instead of
    /// asking the server, which for a key nobody put would wait out the timeout.
    fn get(
        &self,
        who: &Proc,
        key: &CStr,
        local_only: bool,
        timeout: Duration,
    ) -> Result<Option<Owned<'_>>, BootError> {
        let info = [
            Info::flag(PMIX_OPTIONAL, local_only),
            Info::int(PMIX_TIMEOUT, timeout_secs(timeout)),
        ];
        let mut out: *mut Value = ptr::null_mut();
        // SAFETY: `who`, `key` and `info` are valid for the call; on success PMIx
        // stores a malloc'ed value in `out`, owned from then on by `Owned`.
        let st = unsafe { (self.get)(who, key.as_ptr(), info.as_ptr(), info.len(), &mut out) };
        if st == PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        self.check("PMIx_Get", st)?;
        if out.is_null() {
            return Err(BootError::Protocol(
                "PMIx_Get succeeded without a value".into(),
            ));
        }
        Ok(Some(Owned { lib: self, v: out }))
    }

    /// A byte-object value, from this process's store only: the collecting fence has
    /// brought every rank's committed values there.
    pub(crate) fn get_bytes(
        &self,
        who: &Proc,
        key: &CStr,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>, BootError> {
        let Some(v) = self.get(who, key, true, timeout)? else {
            return Ok(None);
        };
        // SAFETY: `v.v` is a valid value from PMIx_Get, alive until `v` drops.
        let val = unsafe { *v.v };
        if val.type_ != PMIX_BYTE_OBJECT {
            return Err(BootError::Protocol(format!(
                "PMIx value of type {} where bytes were put",
                val.type_
            )));
        }
        // SAFETY: the type says the union holds a byte object.
        let bo = unsafe { val.data.bo };
        if bo.size == 0 {
            return Ok(Some(Vec::new()));
        }
        if bo.bytes.is_null() || bo.size > crate::MAX_VALUE_LEN {
            return Err(BootError::Protocol(format!(
                "PMIx byte object of {} bytes at {:?}",
                bo.size, bo.bytes
            )));
        }
        // SAFETY: a byte object owns `size` readable bytes at `bytes`, alive until the
        // value is released (after this copy).
        let bytes = unsafe { std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size) };
        Ok(Some(bytes.to_vec()))
    }

    /// An unsigned integer value (PMIx uses both widths for job information).
    pub(crate) fn get_uint(
        &self,
        who: &Proc,
        key: &CStr,
        timeout: Duration,
    ) -> Result<Option<u32>, BootError> {
        let Some(v) = self.get(who, key, false, timeout)? else {
            return Ok(None);
        };
        // SAFETY: `v.v` is a valid value from PMIx_Get, alive until `v` drops.
        let val = unsafe { *v.v };
        // SAFETY (both arms): the type tag says which union member is live.
        match val.type_ {
            PMIX_UINT32 => Ok(Some(unsafe { val.data.uint32 })),
            PMIX_UINT16 => Ok(Some(u32::from(unsafe { val.data.uint16 }))),
            t => Err(BootError::Protocol(format!(
                "PMIx {key:?} has type {t}, not an unsigned integer"
            ))),
        }
    }
}

/// A proc in `nspace` (which came from PMIx_Init, so fits).
pub(crate) fn proc_in(nspace: &[c_char; PMIX_MAX_NSLEN + 1], rank: u32) -> Proc {
    Proc {
        nspace: *nspace,
        rank,
    }
}

/// A key for PMIx: the caller's checked key in a prefix of our own, clear of PMIx's
/// reserved `pmix.` names.
pub(crate) fn key(k: &str) -> CString {
    let s = format!("fabric.{k}");
    debug_assert!(s.len() < PMIX_MAX_KEYLEN);
    CString::new(s).expect("checked keys have no NUL")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    /// Compiles a C program against the installed pmix_common.h that prints each
    /// size, offset and constant used here, and compares with this module's.
    #[test]
    fn layout_matches_the_installed_header() {
        let cflags = Command::new("pkg-config")
            .args(["--cflags", "pmix"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "-I/usr/lib/x86_64-linux-gnu/pmix2/include".to_owned());
        let dir = std::env::temp_dir().join(format!("fabric-boot-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("layout.c");
        std::fs::write(
            &src,
            r#"
#include <stddef.h>
#include <stdio.h>
#include <pmix_common.h>
#define P(name, v) printf("%s %lld\n", name, (long long)(v))
int main(void) {
    P("proc.size", sizeof(pmix_proc_t));
    P("proc.nspace", offsetof(pmix_proc_t, nspace));
    P("proc.rank", offsetof(pmix_proc_t, rank));
    P("bo.size", sizeof(pmix_byte_object_t));
    P("bo.bytes", offsetof(pmix_byte_object_t, bytes));
    P("bo.len", offsetof(pmix_byte_object_t, size));
    P("value.size", sizeof(pmix_value_t));
    P("value.align", _Alignof(pmix_value_t));
    P("value.type", offsetof(pmix_value_t, type));
    P("value.data", offsetof(pmix_value_t, data));
    P("info.size", sizeof(pmix_info_t));
    P("info.key", offsetof(pmix_info_t, key));
    P("info.flags", offsetof(pmix_info_t, flags));
    P("info.value", offsetof(pmix_info_t, value));
    P("sizeof.type", sizeof(pmix_data_type_t));
    P("sizeof.rank", sizeof(pmix_rank_t));
    P("sizeof.scope", sizeof(pmix_scope_t));
    P("sizeof.status", sizeof(pmix_status_t));
    P("sizeof.flags", sizeof(pmix_info_directives_t));
    P("NSLEN", PMIX_MAX_NSLEN);
    P("KEYLEN", PMIX_MAX_KEYLEN);
    P("SUCCESS", PMIX_SUCCESS);
    P("NOT_FOUND", PMIX_ERR_NOT_FOUND);
    P("WILDCARD", PMIX_RANK_WILDCARD);
    P("GLOBAL", PMIX_GLOBAL);
    P("BOOL", PMIX_BOOL);
    P("INT", PMIX_INT);
    P("UINT16", PMIX_UINT16);
    P("UINT32", PMIX_UINT32);
    P("BYTE_OBJECT", PMIX_BYTE_OBJECT);
    printf("key.collect %s\nkey.timeout %s\nkey.optional %s\nkey.jobsize %s\nkey.lrank %s\nkey.lsize %s\n",
           PMIX_COLLECT_DATA, PMIX_TIMEOUT, PMIX_OPTIONAL, PMIX_JOB_SIZE, PMIX_LOCAL_RANK,
           PMIX_LOCAL_SIZE);
    return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("layout");
        let mut cc = Command::new("cc");
        cc.args(cflags.split_whitespace())
            .arg(&src)
            .arg("-o")
            .arg(&exe);
        let out = cc.output().expect("run cc");
        assert!(
            out.status.success(),
            "compiling against pmix_common.h failed (is libpmix-dev installed?): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let text = String::from_utf8(out.stdout).unwrap();
        let c: HashMap<&str, &str> = text.lines().filter_map(|l| l.split_once(' ')).collect();
        let num = |k: &str| -> i64 { c[k].parse().unwrap() };
        let expect: &[(&str, i64)] = &[
            ("proc.size", size_of::<Proc>() as i64),
            ("proc.nspace", offset_of!(Proc, nspace) as i64),
            ("proc.rank", offset_of!(Proc, rank) as i64),
            ("bo.size", size_of::<ByteObject>() as i64),
            ("bo.bytes", offset_of!(ByteObject, bytes) as i64),
            ("bo.len", offset_of!(ByteObject, size) as i64),
            ("value.size", size_of::<Value>() as i64),
            ("value.align", std::mem::align_of::<Value>() as i64),
            ("value.type", offset_of!(Value, type_) as i64),
            ("value.data", offset_of!(Value, data) as i64),
            ("info.size", size_of::<Info>() as i64),
            ("info.key", offset_of!(Info, key) as i64),
            ("info.flags", offset_of!(Info, flags) as i64),
            ("info.value", offset_of!(Info, value) as i64),
            ("sizeof.type", size_of::<u16>() as i64),
            ("sizeof.rank", size_of::<u32>() as i64),
            ("sizeof.scope", size_of::<u8>() as i64),
            ("sizeof.status", size_of::<c_int>() as i64),
            ("sizeof.flags", size_of::<u32>() as i64),
            ("NSLEN", PMIX_MAX_NSLEN as i64),
            ("KEYLEN", PMIX_MAX_KEYLEN as i64),
            ("SUCCESS", PMIX_SUCCESS as i64),
            ("NOT_FOUND", PMIX_ERR_NOT_FOUND as i64),
            ("WILDCARD", PMIX_RANK_WILDCARD as i64),
            ("GLOBAL", PMIX_GLOBAL as i64),
            ("BOOL", PMIX_BOOL as i64),
            ("INT", PMIX_INT as i64),
            ("UINT16", PMIX_UINT16 as i64),
            ("UINT32", PMIX_UINT32 as i64),
            ("BYTE_OBJECT", PMIX_BYTE_OBJECT as i64),
        ];
        for (k, v) in expect {
            assert_eq!(num(k), *v, "{k}: header says {}, Rust says {v}", c[k]);
        }
        for (k, v) in [
            ("key.collect", PMIX_COLLECT_DATA),
            ("key.timeout", PMIX_TIMEOUT),
            ("key.optional", PMIX_OPTIONAL),
            ("key.jobsize", PMIX_JOB_SIZE),
            ("key.lrank", PMIX_LOCAL_RANK),
            ("key.lsize", PMIX_LOCAL_SIZE),
        ] {
            assert_eq!(c[k], v.to_str().unwrap(), "{k}");
        }
    }

    #[test]
    fn timeouts_round_up_and_never_mean_forever() {
        assert_eq!(timeout_secs(Duration::from_millis(1)), 1);
        assert_eq!(timeout_secs(Duration::from_millis(1500)), 2);
        assert_eq!(timeout_secs(Duration::from_secs(60)), 60);
        assert_eq!(timeout_secs(Duration::from_secs(u64::MAX)), c_int::MAX);
    }
}
