//! The auth_hba_file (pg_hba.conf format, auth_type = hba): rules parsed by a pure function whose
//! `@file` includes come from a loader, so it can be fuzzed and tested without files.
//!
//! Supported: line kinds local, host, hostssl, hostnossl; database and user lists (commas, `all`,
//! `sameuser` and `replication` for databases, quoted names, `@file` relative to the hba file);
//! addresses as CIDR, address + mask, or `all`; methods trust, reject, md5, password,
//! scram-sha-256, cert, peer; options `map=` (ident map, see `ident.rs`), `clientcert=` and
//! `clientname=CN`. Refused with a clear error: `+group`, samerole, samegroup, host names,
//! samehost/samenet, other methods, other options (PostgreSQL's own answer to an option it does
//! not know: a line whose condition would be dropped must not load as a weaker line).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::hba_lex::{lex, take_list, take_word, Token};

/// Nesting limit for `@file` includes.
const MAX_INCLUDE_DEPTH: usize = 10;

/// Which connections a line applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HbaConnType {
    /// Unix socket.
    Local,
    /// TCP, with or without TLS.
    Host,
    /// TCP with TLS.
    HostSsl,
    /// TCP without TLS.
    HostNoSsl,
}

/// The authentication method of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HbaMethod {
    Trust,
    Reject,
    /// md5 (SCRAM when the stored secret is SCRAM, like PostgreSQL).
    Md5,
    /// Cleartext password.
    Password,
    ScramSha256,
    /// TLS client certificate: CN (or ident map) must match the user.
    Cert,
    /// Unix socket peer credentials: OS user (or ident map) must match the user.
    Peer,
}

impl HbaMethod {
    pub fn as_str(&self) -> &'static str {
        match self {
            HbaMethod::Trust => "trust",
            HbaMethod::Reject => "reject",
            HbaMethod::Md5 => "md5",
            HbaMethod::Password => "password",
            HbaMethod::ScramSha256 => "scram-sha-256",
            HbaMethod::Cert => "cert",
            HbaMethod::Peer => "peer",
        }
    }
}

/// A database or user column.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NameList {
    /// `all`.
    pub all: bool,
    /// `sameuser` (database column only): the database named like the user.
    pub same_user: bool,
    /// `replication` (database column only): physical replication connections, which no other
    /// word of the column matches (PostgreSQL's rule).
    pub replication: bool,
    /// Literal names (quoted names, and names read from `@file`s).
    pub names: Vec<String>,
}

impl NameList {
    /// Whether `name` matches; `user` is the connecting user (for `sameuser`).
    pub fn matches(&self, name: &str, user: &str) -> bool {
        self.all || (self.same_user && name == user) || self.names.iter().any(|n| n == name)
    }

    /// The database column: a physical replication connection (`replication=true`) names no
    /// database and matches only `replication`; any other connection (a logical one included)
    /// matches by name, `all` and `sameuser`, never `replication`.
    pub fn matches_database(&self, name: &str, user: &str, physical_replication: bool) -> bool {
        if physical_replication {
            self.replication
        } else {
            self.matches(name, user)
        }
    }
}

/// The address column of a host line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HbaAddress {
    /// `all`: any address.
    Any,
    /// A network: `addr` already masked, `prefix` bits.
    Net { addr: IpAddr, prefix: u8 },
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HbaRule {
    /// File and line the rule came from, for logs ("file:line").
    pub file: String,
    pub line: usize,
    pub conn: HbaConnType,
    pub databases: NameList,
    pub users: NameList,
    /// None for local lines.
    pub address: Option<HbaAddress>,
    pub method: HbaMethod,
    /// `map=` option: ident map name for peer and cert.
    pub map: Option<String>,
    /// `clientcert=`: a client certificate the line requires besides its method.
    pub client_cert: Option<ClientCert>,
}

/// The `clientcert=` option (PostgreSQL 14+): what a `hostssl` line asks of the client's
/// certificate before its method runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCert {
    /// `verify-ca`: a certificate that client_tls_ca_file verifies.
    VerifyCa,
    /// `verify-full`: that, and its CN is the user (or `map=` allows it, on cert lines).
    VerifyFull,
}

impl ClientCert {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientCert::VerifyCa => "verify-ca",
            ClientCert::VerifyFull => "verify-full",
        }
    }
}

impl HbaRule {
    /// "file:line", for log lines.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The rules of one hba file, in file order (first match wins).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HbaRules {
    pub rules: Vec<HbaRule>,
}

/// Reads an `@file` include: path in, text or an error reason out.
pub type IncludeLoader<'a> = dyn FnMut(&Path) -> Result<String, String> + 'a;

/// Parse hba text named `path` (used in errors and to resolve `@file` relative to its directory).
pub fn parse_hba(
    text: &str,
    path: &Path,
    loader: &mut IncludeLoader<'_>,
) -> Result<HbaRules, ConfigError> {
    let file = path.display().to_string();
    let lines = lex(text).map_err(|(line, r)| ConfigError::syntax(&file, line, r))?;
    let mut rules = Vec::with_capacity(lines.len());
    for line in lines {
        let err = |r: String| ConfigError::syntax(&file, line.number, r);
        let rule =
            parse_line(&line.tokens, path, loader, &file, line.number).map_err(|e| match e {
                LineError::Here(r) => err(r),
                LineError::Include(e) => e,
            })?;
        rules.push(rule);
    }
    Ok(HbaRules { rules })
}

/// Read and parse the hba file at `path`, reading `@file` includes from disk.
pub fn load_hba(path: &Path) -> Result<HbaRules, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(&file, e.to_string()))?;
    parse_hba(&text, path, &mut |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| e.to_string())
    })
}

enum LineError {
    /// An error on this line.
    Here(String),
    /// An error inside an included file (already names that file and line).
    Include(ConfigError),
}

impl From<String> for LineError {
    fn from(s: String) -> Self {
        LineError::Here(s)
    }
}

impl From<&str> for LineError {
    fn from(s: &str) -> Self {
        LineError::Here(s.to_string())
    }
}

fn parse_line(
    tokens: &[Token],
    path: &Path,
    loader: &mut IncludeLoader<'_>,
    file: &str,
    line: usize,
) -> Result<HbaRule, LineError> {
    let mut pos = 0;
    let (kind, quoted) = take_word(tokens, &mut pos).ok_or("expected a connection type")?;
    let conn = match (kind.as_str(), quoted) {
        ("local", false) => HbaConnType::Local,
        ("host", false) => HbaConnType::Host,
        ("hostssl", false) => HbaConnType::HostSsl,
        ("hostnossl", false) => HbaConnType::HostNoSsl,
        ("hostgssenc" | "hostnogssenc", false) => {
            return Err(format!("connection type \"{kind}\" is not supported (no GSSAPI)").into())
        }
        ("include" | "include_if_exists" | "include_dir", false) => {
            return Err(format!("\"{kind}\" directives are not supported").into())
        }
        _ => return Err(format!("invalid connection type \"{kind}\"").into()),
    };
    let db_items = take_list(tokens, &mut pos).ok_or("expected a database list")?;
    let databases = names(&db_items, true, path, loader, 0)?;
    let user_items = take_list(tokens, &mut pos).ok_or("expected a user list")?;
    let users = names(&user_items, false, path, loader, 0)?;
    let address = if conn == HbaConnType::Local {
        None
    } else {
        Some(address(tokens, &mut pos)?)
    };
    let (m, _) = take_word(tokens, &mut pos).ok_or("expected an authentication method")?;
    let method = match m.as_str() {
        "trust" => HbaMethod::Trust,
        "reject" => HbaMethod::Reject,
        "md5" => HbaMethod::Md5,
        "password" => HbaMethod::Password,
        "scram-sha-256" => HbaMethod::ScramSha256,
        "cert" => HbaMethod::Cert,
        "peer" => HbaMethod::Peer,
        _ => return Err(format!("unsupported authentication method \"{m}\"").into()),
    };
    if method == HbaMethod::Peer && conn != HbaConnType::Local {
        return Err("peer authentication is only supported on local lines"
            .to_string()
            .into());
    }
    if method == HbaMethod::Cert && conn == HbaConnType::Local {
        return Err("cert authentication is only supported on host lines"
            .to_string()
            .into());
    }
    let mut map = None;
    let mut client_cert = None;
    while pos < tokens.len() {
        let (opt, _) = take_word(tokens, &mut pos).ok_or("unexpected ',' after the method")?;
        match opt.split_once('=') {
            Some(("map", v)) if !v.is_empty() => map = Some(v.to_string()),
            Some(("clientcert", v)) => client_cert = Some(clientcert(v, conn, method)?),
            // The CN is what cert lines and clientcert=verify-full compare; DN is not read.
            Some(("clientname", v)) if v.eq_ignore_ascii_case("CN") => {}
            Some(("clientname", v)) => {
                return Err(format!(
                    "clientname={v} is not supported (the certificate's CN is matched)"
                )
                .into())
            }
            Some((k, _)) if !k.is_empty() => {
                return Err(format!(
                    "unsupported authentication option \"{k}\" (supported: map, clientcert, clientname=CN)"
                )
                .into())
            }
            _ => return Err(format!("invalid option \"{opt}\" (expected name=value)").into()),
        }
    }
    if map.is_some() && !matches!(method, HbaMethod::Peer | HbaMethod::Cert) {
        return Err("map= is only valid with peer or cert".to_string().into());
    }
    Ok(HbaRule {
        file: file.to_string(),
        line,
        conn,
        databases,
        users,
        address,
        method,
        map,
        client_cert,
    })
}

/// `clientcert=`'s value, with PostgreSQL's rules: `hostssl` lines only, and a `cert` line
/// (which verifies the name anyway) takes only `verify-full`.
fn clientcert(v: &str, conn: HbaConnType, method: HbaMethod) -> Result<ClientCert, LineError> {
    let c = match v {
        "verify-ca" => ClientCert::VerifyCa,
        "verify-full" => ClientCert::VerifyFull,
        _ => {
            return Err(
                format!("invalid value for clientcert: \"{v}\" (verify-ca or verify-full)").into(),
            )
        }
    };
    if conn != HbaConnType::HostSsl {
        return Err("clientcert can only be configured for hostssl lines".into());
    }
    if method == HbaMethod::Cert && c != ClientCert::VerifyFull {
        return Err("clientcert only accepts verify-full with cert authentication".into());
    }
    Ok(c)
}

/// Build a name list from a column's words; `@file` items are read through `loader`.
fn names(
    items: &[(String, bool)],
    is_db: bool,
    path: &Path,
    loader: &mut IncludeLoader<'_>,
    depth: usize,
) -> Result<NameList, LineError> {
    let mut list = NameList::default();
    add_names(&mut list, items, is_db, path, loader, depth)?;
    Ok(list)
}

fn add_names(
    list: &mut NameList,
    items: &[(String, bool)],
    is_db: bool,
    path: &Path,
    loader: &mut IncludeLoader<'_>,
    depth: usize,
) -> Result<(), LineError> {
    for (word, quoted) in items {
        if *quoted {
            list.names.push(word.clone());
            continue;
        }
        match word.as_str() {
            "all" => list.all = true,
            "sameuser" if is_db => list.same_user = true,
            "replication" if is_db => list.replication = true,
            "samerole" | "samegroup" if is_db => {
                return Err(format!("database keyword \"{word}\" is not supported").into())
            }
            w if w.starts_with('+') => {
                return Err(format!("group membership (\"{w}\") is not supported").into())
            }
            w if w.starts_with('@') => include(list, &w[1..], is_db, path, loader, depth)?,
            w => list.names.push(w.to_string()),
        }
    }
    Ok(())
}

/// `@file`: names separated by whitespace or commas, relative to the including file's directory.
fn include(
    list: &mut NameList,
    name: &str,
    is_db: bool,
    parent: &Path,
    loader: &mut IncludeLoader<'_>,
    depth: usize,
) -> Result<(), LineError> {
    if name.is_empty() {
        return Err("empty @file name".to_string().into());
    }
    if depth >= MAX_INCLUDE_DEPTH {
        return Err(format!("@{name}: includes nested too deeply").into());
    }
    let target = resolve_relative(parent, name);
    let shown = target.display().to_string();
    let text = loader(&target).map_err(|r| LineError::Here(format!("@{name}: {shown}: {r}")))?;
    let lines =
        lex(&text).map_err(|(line, r)| LineError::Include(ConfigError::syntax(&shown, line, r)))?;
    for line in lines {
        let items: Vec<(String, bool)> = line
            .tokens
            .iter()
            .filter_map(|t| match t {
                Token::Word { text, quoted } => Some((text.clone(), *quoted)),
                Token::Comma => None,
            })
            .collect();
        add_names(list, &items, is_db, &target, loader, depth + 1).map_err(|e| match e {
            LineError::Here(r) => LineError::Include(ConfigError::syntax(&shown, line.number, r)),
            other => other,
        })?;
    }
    Ok(())
}

fn resolve_relative(parent: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match parent.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p),
        _ => p.to_path_buf(),
    }
}

/// The address column: `all`, `addr/bits`, or `addr mask`.
fn address(tokens: &[Token], pos: &mut usize) -> Result<HbaAddress, LineError> {
    let (word, quoted) = take_word(tokens, pos).ok_or("expected an address")?;
    if !quoted {
        match word.as_str() {
            "all" => return Ok(HbaAddress::Any),
            "samehost" | "samenet" => {
                return Err(format!("address \"{word}\" is not supported").into())
            }
            _ => {}
        }
    }
    if let Some((a, bits)) = word.split_once('/') {
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("invalid IP address \"{a}\""))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = bits
            .parse()
            .ok()
            .filter(|b| *b <= max)
            .ok_or_else(|| format!("invalid CIDR mask \"{bits}\" in \"{word}\""))?;
        return Ok(net(addr, prefix));
    }
    let addr: IpAddr = word.parse().map_err(|_| {
        format!("invalid IP address \"{word}\" (host names are not supported; use CIDR notation)")
    })?;
    let (mask_word, _) = take_word(tokens, pos)
        .ok_or_else(|| format!("IP address \"{word}\" needs a mask (or use CIDR notation)"))?;
    let mask: IpAddr = mask_word
        .parse()
        .map_err(|_| format!("invalid IP mask \"{mask_word}\""))?;
    if mask.is_ipv4() != addr.is_ipv4() {
        return Err(
            format!("IP address \"{word}\" and mask \"{mask_word}\" differ in family").into(),
        );
    }
    let prefix = mask_prefix(&mask).ok_or_else(|| format!("invalid IP mask \"{mask_word}\""))?;
    Ok(net(addr, prefix))
}

fn bits_of(addr: &IpAddr) -> (u128, u32) {
    match addr {
        IpAddr::V4(a) => (u128::from(u32::from(*a)), 32),
        IpAddr::V6(a) => (u128::from(*a), 128),
    }
}

/// Prefix length of a contiguous mask (255.255.255.0 -> 24); None for a non-contiguous one.
fn mask_prefix(mask: &IpAddr) -> Option<u8> {
    let (m, width) = bits_of(mask);
    let ones = m.count_ones();
    let expected = prefix_mask(ones as u8, width);
    (m == expected).then_some(ones as u8)
}

fn prefix_mask(prefix: u8, width: u32) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let all: u128 = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    (all << (width - u32::from(prefix))) & all
}

fn net(addr: IpAddr, prefix: u8) -> HbaAddress {
    let (a, width) = bits_of(&addr);
    let masked = a & prefix_mask(prefix, width);
    let addr = match addr {
        IpAddr::V4(_) => IpAddr::V4((masked as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(masked.into()),
    };
    HbaAddress::Net { addr, prefix }
}

impl HbaAddress {
    /// Whether `ip` is in this network. IPv4-mapped IPv6 clients match IPv4 networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match self {
            HbaAddress::Any => true,
            HbaAddress::Net { addr, prefix } => {
                let ip = match ip {
                    IpAddr::V6(v6) if addr.is_ipv4() => match v6.to_ipv4_mapped() {
                        Some(v4) => IpAddr::V4(v4),
                        None => return false,
                    },
                    other => other,
                };
                if ip.is_ipv4() != addr.is_ipv4() {
                    return false;
                }
                let (a, width) = bits_of(addr);
                let (c, _) = bits_of(&ip);
                let m = prefix_mask(*prefix, width);
                c & m == a
            }
        }
    }
}
