//! Fuzzes the receive-cell parser with arbitrary peer bytes: it must never panic, and
//! every length and offset it yields must lie inside the cells it was given.
#![no_main]

use fabric_shm::cell::{parse, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (w, rest) = data.split_at(8);
    let w = u64::from_le_bytes(w.try_into().unwrap());
    // The receiver passes whole cells: round the rest down to 64-byte cells.
    let avail = &rest[..rest.len() / 64 * 64];
    // The receive lanes of responses and atomic requests, which skip `parse`.
    if let Ok((_, payload, cells)) = fabric_shm::cell::response(w, avail) {
        assert!(fabric_shm::cell::RESP_BODY + payload.len() <= cells * 64);
        assert!(cells * 64 <= avail.len());
    }
    if let Ok((hdr, payload, cells)) = fabric_shm::cell::atomic(w, avail) {
        assert!(fabric_shm::cell::ATOMIC_BODY + payload.len() <= cells * 64);
        assert!(cells * 64 <= avail.len());
        assert_eq!(hdr.len, payload.len() as u64);
    }
    match parse(w, avail, fabric_shm::INLINE_MAX) {
        Ok(Parsed::Inline { off, len, cells, .. }) => {
            assert!(off + len <= avail.len());
            assert!(cells * 64 <= avail.len());
        }
        Ok(Parsed::Stream { len, cells, hdr }) => {
            assert!(fabric_shm::cell::STREAM_BODY + len <= cells * 64);
            assert!(cells * 64 <= avail.len());
            assert_eq!(hdr.len, len as u64);
        }
        Ok(Parsed::Large { cells, desc, hdr }) => {
            assert!(cells * 64 <= avail.len());
            assert_eq!(desc.len, hdr.len);
            if desc.mode == fabric_shm::cell::Desc::RNDV {
                assert!((desc.slot as usize) < fabric_shm::RNDV_RECORDS);
            }
        }
        Ok(Parsed::Skip) | Err(_) => {}
    }
});
