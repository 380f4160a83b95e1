// The check of the `cell_parse` fuzz target, shared with the stable-toolchain run of
// the same target (`tests/cell_parse.rs`): included by both, so they test one thing.

/// Parses `data` (a control word, then cells of peer bytes) every way the receiver
/// does; panics if a parser panics or yields a length or offset outside the cells.
pub fn check(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    let (w, rest) = data.split_at(8);
    let w = u64::from_le_bytes(w.try_into().unwrap());
    // The receiver passes whole cells: round the rest down to 64-byte cells.
    let avail = &rest[..rest.len() / 64 * 64];
    // Where a payload view lies in `avail`: it must be the bytes it claims to be.
    let start = avail.as_ptr() as usize;
    let at = |p: *const u8| p as usize - start;
    // The receive lanes of small messages, responses and atomic requests, which skip
    // `parse`.
    if let Ok((m, payload, cells)) = fabric_shm::cell::compact(w, avail.into()) {
        assert_eq!(m.len, payload.len());
        assert_eq!(at(payload.as_ptr()), fabric_shm::cell::compact_prefix(m.data.is_some()));
        assert!(payload.len() <= cells * 64);
        assert!(cells * 64 <= avail.len());
    }
    if let Ok((_, payload, cells)) = fabric_shm::cell::response(w, avail.into()) {
        assert_eq!(at(payload.as_ptr()), fabric_shm::cell::RESP_BODY);
        assert!(fabric_shm::cell::RESP_BODY + payload.len() <= cells * 64);
        assert!(cells * 64 <= avail.len());
    }
    if let Ok((hdr, payload, cells)) = fabric_shm::cell::atomic(w, avail.into()) {
        assert_eq!(at(payload.as_ptr()), fabric_shm::cell::ATOMIC_BODY);
        assert!(fabric_shm::cell::ATOMIC_BODY + payload.len() <= cells * 64);
        assert!(cells * 64 <= avail.len());
        assert_eq!(hdr.len, payload.len() as u64);
    }
    match fabric_shm::cell::parse(w, avail.into(), fabric_shm::INLINE_MAX) {
        Ok(fabric_shm::cell::Parsed::Inline { off, len, cells, .. }) => {
            assert!(off + len <= avail.len());
            assert!(cells * 64 <= avail.len());
        }
        Ok(fabric_shm::cell::Parsed::Stream { len, cells, hdr }) => {
            assert!(fabric_shm::cell::STREAM_BODY + len <= cells * 64);
            assert!(cells * 64 <= avail.len());
            assert_eq!(hdr.len, len as u64);
        }
        Ok(fabric_shm::cell::Parsed::Large { cells, desc, hdr }) => {
            assert!(cells * 64 <= avail.len());
            assert_eq!(desc.len, hdr.len);
            if desc.mode == fabric_shm::cell::Desc::RNDV {
                assert!((desc.slot as usize) < fabric_shm::RNDV_RECORDS);
            }
        }
        Ok(fabric_shm::cell::Parsed::Skip) | Err(_) => {}
    }
}
