//! Dropping root after the ports are bound: resolve the user and group while
//! /etc is still visible, optionally chroot, then give up the groups, the gid
//! and the uid, in that order (each step needs the privilege the next removes).

use crate::config::PrivilegesConfig;
use std::ffi::CString;
use std::io;
use std::path::PathBuf;

/// Who to become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
}

/// What start-up does about privileges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrivilegePlan {
    /// Serve as the user we were started as.
    Keep,
    /// Become `identity` (after a chroot to `chroot`, when set).
    Drop {
        identity: Identity,
        chroot: Option<PathBuf>,
    },
}

impl PrivilegePlan {
    /// True when the workers will serve with root's uid.
    pub fn serves_as_root(&self, euid: libc::uid_t) -> bool {
        match self {
            PrivilegePlan::Keep => euid == 0,
            PrivilegePlan::Drop { identity, .. } => identity.uid == 0,
        }
    }
}

/// Decides from the config and the effective uid; `resolve` looks the user
/// and group up (the system's databases in production, a table in tests).
pub fn plan(
    config: &PrivilegesConfig,
    euid: libc::uid_t,
    resolve: impl Fn(&str, &str) -> Result<Identity, String>,
) -> Result<PrivilegePlan, String> {
    let chroot = (!config.chroot.is_empty()).then(|| PathBuf::from(&config.chroot));
    if config.user.is_empty() {
        if euid == 0 && !config.allow_root {
            return Err(
                "refusing to serve as root: set `privileges.user` (--user NAME: a user \
                        of its own, such as tracker, not one other programs share such as \
                        nobody) to drop to that user after binding the ports, or set \
                        `privileges.allow_root = true` (--allow-root) to serve as root"
                    .to_string(),
            );
        }
        return Ok(PrivilegePlan::Keep);
    }
    let identity = resolve(&config.user, &config.group)?;
    if euid == 0 {
        return Ok(PrivilegePlan::Drop { identity, chroot });
    }
    if identity.uid != euid {
        return Err(format!(
            "cannot switch to user {} (`privileges.user`): the tracker runs as uid {euid}, and \
             only root can change user; start it as root or as {} itself",
            identity.user, identity.user
        ));
    }
    if chroot.is_some() {
        return Err(format!(
            "cannot chroot to {} (`privileges.chroot`): only root can; start the tracker as \
             root with `privileges.user` set",
            config.chroot
        ));
    }
    Ok(PrivilegePlan::Keep)
}

/// Looks `user` up in the password database, and `group` (empty: the user's
/// own group) in the group database.
pub fn resolve(user: &str, group: &str) -> Result<Identity, String> {
    let (uid, user_gid) = lookup_user(user)
        .map_err(|e| format!("cannot look up user {user} (`privileges.user`): {e}"))?
        .ok_or_else(|| format!("no such user: {user} (`privileges.user`)"))?;
    let gid = if group.is_empty() {
        user_gid
    } else {
        lookup_group(group)
            .map_err(|e| format!("cannot look up group {group} (`privileges.group`): {e}"))?
            .ok_or_else(|| format!("no such group: {group} (`privileges.group`)"))?
    };
    Ok(Identity {
        user: user.to_string(),
        uid,
        gid,
    })
}

/// Carries out a `Drop` plan. Call before any thread starts: each thread has
/// its own credentials in the kernel.
pub fn drop_privileges(
    identity: &Identity,
    chroot: Option<&std::path::Path>,
) -> Result<(), String> {
    if let Some(dir) = chroot {
        let path = cstring(dir.as_os_str().as_encoded_bytes())?;
        // SAFETY: plain syscalls on a NUL-terminated path.
        if unsafe { libc::chroot(path.as_ptr()) } != 0 {
            return Err(format!(
                "cannot chroot to {} (`privileges.chroot`): {}",
                dir.display(),
                io::Error::last_os_error()
            ));
        }
        // SAFETY: as above.
        if unsafe { libc::chdir(c"/".as_ptr()) } != 0 {
            return Err(format!(
                "cannot chdir to / in the chroot: {}",
                io::Error::last_os_error()
            ));
        }
    }
    let gid = identity.gid;
    // SAFETY: setgroups reads one gid; setgid and setuid take plain ids.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            return Err(format!("cannot set groups: {}", io::Error::last_os_error()));
        }
        if libc::setgid(gid) != 0 {
            return Err(format!(
                "cannot set gid {gid}: {}",
                io::Error::last_os_error()
            ));
        }
        if libc::setuid(identity.uid) != 0 {
            return Err(format!(
                "cannot set uid {} ({}): {}",
                identity.uid,
                identity.user,
                io::Error::last_os_error()
            ));
        }
        // Root cannot be regained: a sanity check that the drop took.
        if identity.uid != 0 && libc::setuid(0) == 0 {
            return Err("privileges were not dropped: setuid(0) still succeeds".to_string());
        }
    }
    // A change of user sets it as fs.suid_dumpable says, which may be 2.
    undumpable()
}

/// Makes this process undumpable: no other process of its user may trace
/// it or read its memory (the connection-id key, the swarms) or its /proc
/// files, which then belong to root; and a crash leaves no core with them.
/// At start, and again after a change of user, which resets it.
pub fn undumpable() -> Result<(), String> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes one integer.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot make the tracker undumpable (PR_SET_DUMPABLE): {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The effective uid.
pub fn euid() -> libc::uid_t {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn cstring(bytes: &[u8]) -> Result<CString, String> {
    CString::new(bytes).map_err(|_| "a name or path holds a NUL byte".to_string())
}

/// (uid, primary gid), or None when there is no such user.
fn lookup_user(name: &str) -> io::Result<Option<(libc::uid_t, libc::gid_t)>> {
    let name = cstring(name.as_bytes()).map_err(io::Error::other)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: getpwnam_r writes a passwd whose strings point into `buf`,
        // which outlives every use of `entry`.
        let (rc, found) = unsafe {
            let mut entry: libc::passwd = std::mem::zeroed();
            let mut result: *mut libc::passwd = std::ptr::null_mut();
            let rc = libc::getpwnam_r(
                name.as_ptr(),
                &mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            );
            (
                rc,
                (!result.is_null()).then_some((entry.pw_uid, entry.pw_gid)),
            )
        };
        match rc {
            0 => return Ok(found),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            rc => return Err(io::Error::from_raw_os_error(rc)),
        }
    }
}

/// The gid of a group name, or None when there is no such group.
fn lookup_group(name: &str) -> io::Result<Option<libc::gid_t>> {
    let name = cstring(name.as_bytes()).map_err(io::Error::other)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: as in lookup_user, for the group database.
        let (rc, found) = unsafe {
            let mut entry: libc::group = std::mem::zeroed();
            let mut result: *mut libc::group = std::ptr::null_mut();
            let rc = libc::getgrnam_r(
                name.as_ptr(),
                &mut entry,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            );
            (rc, (!result.is_null()).then_some(entry.gr_gid))
        };
        match rc {
            0 => return Ok(found),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            rc => return Err(io::Error::from_raw_os_error(rc)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(user: &str, group: &str, chroot: &str, allow_root: bool) -> PrivilegesConfig {
        PrivilegesConfig {
            user: user.into(),
            group: group.into(),
            chroot: chroot.into(),
            allow_root,
        }
    }

    fn table(user: &str, _group: &str) -> Result<Identity, String> {
        match user {
            "nobody" => Ok(Identity {
                user: "nobody".into(),
                uid: 65534,
                gid: 65534,
            }),
            "me" => Ok(Identity {
                user: "me".into(),
                uid: 1000,
                gid: 1000,
            }),
            _ => Err(format!("no such user: {user}")),
        }
    }

    #[test]
    fn root_without_a_user_is_refused_unless_allowed() {
        let err = plan(&config("", "", "", false), 0, table).unwrap_err();
        assert!(
            err.contains("refusing to serve as root") && err.contains("--user"),
            "{err}"
        );
        let keep = plan(&config("", "", "", true), 0, table).unwrap();
        assert_eq!(keep, PrivilegePlan::Keep);
        assert!(keep.serves_as_root(0));
    }

    #[test]
    fn root_with_a_user_drops_to_it() {
        let dropped = plan(&config("nobody", "", "/var/empty", false), 0, table).unwrap();
        match &dropped {
            PrivilegePlan::Drop { identity, chroot } => {
                assert_eq!(identity.uid, 65534);
                assert_eq!(chroot.as_deref(), Some(std::path::Path::new("/var/empty")));
            }
            other => panic!("{other:?}"),
        }
        assert!(!dropped.serves_as_root(0));
        assert!(plan(&config("ghost", "", "", false), 0, table).is_err());
    }

    #[test]
    fn a_plain_user_keeps_itself_and_cannot_become_another() {
        assert_eq!(
            plan(&config("", "", "", false), 1000, table).unwrap(),
            PrivilegePlan::Keep
        );
        assert_eq!(
            plan(&config("me", "", "", false), 1000, table).unwrap(),
            PrivilegePlan::Keep
        );
        let err = plan(&config("nobody", "", "", false), 1000, table).unwrap_err();
        assert!(err.contains("only root"), "{err}");
        let err = plan(&config("me", "", "/srv", false), 1000, table).unwrap_err();
        assert!(err.contains("privileges.chroot"), "{err}");
    }

    #[test]
    fn the_system_databases_resolve_root_and_refuse_strangers() {
        let root = resolve("root", "").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(resolve("no-such-user-here", "")
            .unwrap_err()
            .contains("no such user"));
        assert!(resolve("root", "no-such-group-here")
            .unwrap_err()
            .contains("no such group"));
    }
}
