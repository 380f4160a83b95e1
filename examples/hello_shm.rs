//! Hello over shm between two processes: this program starts a copy of itself, hands
//! it its endpoint's name through the environment, and prints what the copy sends.
use fabric::prelude::*;
use fabric_shm::Shm;

type Net = Stack<Shm>;

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let hints = Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm);
    let info = getinfo::<Net>(Some(&hints))?.remove(0);
    let fabric = Fabric::<Net>::open(&info)?;
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(&CqAttr::DEFAULT)?;
    let av = domain.av(&AvAttr::DEFAULT)?;
    let ep = domain.endpoint(&info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    if let Ok(parent) = std::env::var("HELLO_PARENT") {
        // The copy: greet the parent, whose name came in the environment.
        let to = av.insert(&unhex(&parent))?;
        ep.tsend(b"hello from another process", to, 1, Context(1))?;
        wait(&cq)?;
        return Ok(());
    }
    let name: String = ep.name().iter().map(|b| format!("{b:02x}")).collect();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .env("HELLO_PARENT", name)
        .spawn()?;
    let mut buf = [0u8; 64];
    // SAFETY: `buf` outlives the receive and is read only after its completion.
    unsafe { ep.trecv(&mut buf, FiAddr::UNSPEC, 1, 0, Context(2))? };
    let got = wait(&cq)?;
    println!("{}", String::from_utf8_lossy(&buf[..got.len]));
    child.wait()?;
    Ok(())
}

/// The next completion; reading the CQ drives progress (manual progress).
fn wait(cq: &Cq<Net>) -> Result<CqTaggedEntry> {
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        match cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Ok(_) | Err(Error::Again) => std::thread::yield_now(),
            Err(Error::Avail) => return Err(cq.read_err()?.err),
            Err(err) => return Err(err),
        }
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect()
}
