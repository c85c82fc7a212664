//! The private `redis-server` launcher, checked by speaking RESP by hand. These tests need
//! `redis-server` (scripts/setup.sh installs it) and fail without it.

use std::net::SocketAddr;
use std::path::Path;

use tether_testkit::redis::{RedisOptions, RedisServer};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

/// One connection speaking RESP2: commands as arrays of bulk strings, replies returned raw.
struct Resp(BufReader<TcpStream>);

impl Resp {
    async fn connect(addr: SocketAddr) -> Self {
        Self(BufReader::new(TcpStream::connect(addr).await.unwrap()))
    }

    async fn call(&mut self, args: &[&str]) -> String {
        let mut command = format!("*{}\r\n", args.len());
        for arg in args {
            command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.0
            .get_mut()
            .write_all(command.as_bytes())
            .await
            .unwrap();
        // An array announces how many more replies follow; bulk strings carry a body.
        let mut reply = String::new();
        let mut pending = 1;
        while pending > 0 {
            pending -= 1;
            let mut line = String::new();
            self.0.read_line(&mut line).await.unwrap();
            let len = line[1..].trim_end().parse::<i64>();
            match (line.as_bytes()[0], len) {
                (b'*', Ok(n)) if n > 0 => pending += n,
                (b'$', Ok(n)) if n >= 0 => {
                    let mut body = vec![0; usize::try_from(n).unwrap() + 2];
                    self.0.read_exact(&mut body).await.unwrap();
                    line.push_str(std::str::from_utf8(&body).unwrap());
                }
                _ => {}
            }
            reply.push_str(&line);
        }
        reply
    }
}

#[tokio::test]
async fn starts_on_a_private_port_and_answers_ping() {
    let server = RedisServer::start().await.unwrap();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(
        server.addr(),
        SocketAddr::from(([127, 0, 0, 1], server.port()))
    );

    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    let mut reply = [0; 7];
    stream.read_exact(&mut reply).await.unwrap();
    assert_eq!(&reply, b"+PONG\r\n");
    server.ping().await.unwrap();

    // Its own directory, and nothing written there without persistence.
    let mut conn = Resp::connect(server.addr()).await;
    let dir = server.dir().to_str().unwrap();
    assert_eq!(
        conn.call(&["CONFIG", "GET", "dir"]).await,
        format!("*2\r\n$3\r\ndir\r\n${}\r\n{dir}\r\n", dir.len())
    );
    assert_eq!(
        conn.call(&["CONFIG", "GET", "appendonly"]).await,
        "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    );
    assert_eq!(
        conn.call(&["CONFIG", "GET", "save"]).await,
        "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
}

#[tokio::test]
async fn set_and_get_round_trip() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = Resp::connect(server.addr()).await;
    assert_eq!(
        conn.call(&["SET", "greeting", "hello tether"]).await,
        "+OK\r\n"
    );
    assert_eq!(
        conn.call(&["GET", "greeting"]).await,
        "$12\r\nhello tether\r\n"
    );
    assert_eq!(conn.call(&["GET", "missing"]).await, "$-1\r\n");
}

#[tokio::test]
async fn two_servers_run_at_once_on_different_ports() {
    let a = RedisServer::start().await.unwrap();
    let b = RedisServer::start().await.unwrap();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    let mut on_a = Resp::connect(a.addr()).await;
    let mut on_b = Resp::connect(b.addr()).await;
    assert_eq!(on_a.call(&["SET", "k", "a"]).await, "+OK\r\n");
    assert_eq!(on_b.call(&["GET", "k"]).await, "$-1\r\n");
}

#[tokio::test]
async fn kill_refuses_connections_and_reaps() {
    let mut server = RedisServer::start().await.unwrap();
    let pid = server.pid();
    server.kill().await.unwrap();
    assert!(!server.is_running());
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    let err = TcpStream::connect(server.addr()).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(server.ping().await.is_err());
}

#[tokio::test]
async fn restart_answers_again_on_the_same_port_and_empty() {
    let mut server = RedisServer::start().await.unwrap();
    let port = server.port();
    let mut conn = Resp::connect(server.addr()).await;
    assert_eq!(conn.call(&["SET", "k", "v"]).await, "+OK\r\n");

    server.kill().await.unwrap();
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    server.ping().await.unwrap();
    // Without persistence a restarted Redis has lost everything.
    let mut conn = Resp::connect(server.addr()).await;
    assert_eq!(conn.call(&["GET", "k"]).await, "$-1\r\n");

    // Restarting a running server kills it first.
    let pid = server.pid();
    server.restart().await.unwrap();
    assert_ne!(server.pid(), pid);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    server.ping().await.unwrap();
}

#[tokio::test]
async fn with_persistence_acknowledged_writes_survive_kill_and_restart() {
    let mut server = RedisOptions::new().persistence(true).start().await.unwrap();
    let mut conn = Resp::connect(server.addr()).await;
    assert_eq!(
        conn.call(&["CONFIG", "GET", "appendfsync"]).await,
        "*2\r\n$11\r\nappendfsync\r\n$6\r\nalways\r\n"
    );
    assert_eq!(conn.call(&["SET", "k", "kept"]).await, "+OK\r\n");
    server.kill().await.unwrap();
    server.restart().await.unwrap();
    let mut conn = Resp::connect(server.addr()).await;
    assert_eq!(conn.call(&["GET", "k"]).await, "$4\r\nkept\r\n");
}

#[tokio::test]
async fn drop_stops_it_and_removes_its_directory() {
    let server = RedisServer::start().await.unwrap();
    let (pid, addr, dir) = (server.pid(), server.addr(), server.dir().to_owned());
    assert!(dir.is_dir());
    drop(server);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    let err = TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(!dir.exists());
}
