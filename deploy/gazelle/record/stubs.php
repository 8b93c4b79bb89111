<?php
// The least of Gazelle that its app/Tracker.php needs to run outside
// Gazelle, written for deploy/gazelle/record/driver.php (none of it is
// Gazelle's code): the base class with the cache the tracker calls touch,
// the torrent and user it is handed, and the IRC alert it sends when an
// update fails. The constants of Gazelle's lib/config.php that Tracker.php
// reads are driver.php's. The real Tracker.php and app/Enum/LeechType.php
// are read from Gazelle's repository at run time, after this file.

namespace Gazelle;

/** Gazelle's memcached wrapper, as far as Tracker.php calls it. */
class Cache {
    private array $values = [];

    public function get_value(string $key): mixed {
        return $this->values[$key] ?? false;
    }

    public function cache_value(string $key, mixed $value, int $expiry = 0): bool {
        $this->values[$key] = $value;
        return true;
    }

    public function increment(string $key, int $by = 1): int {
        $this->values[$key] = (int)($this->values[$key] ?? 0) + $by;
        return $this->values[$key];
    }

    public function delete_multi(array $keys): bool {
        foreach ($keys as $key) {
            unset($this->values[$key]);
        }
        return true;
    }
}

/** Gazelle's base of every model: the shared cache and database handle.
 *  No database here: Tracker.php touches one only in delay() and
 *  expireFreeleechTokens(), neither of which talks to Ocelot. */
abstract class Base {
    protected static Cache $cache;
    protected static ?object $db = null;

    public static function initialize(Cache $cache): void {
        static::$cache = $cache;
    }
}

/** A torrent: its id and its 20-byte info-hash. */
abstract class TorrentAbstract {
    public function __construct(
        protected int $id,
        protected string $infoHash,
    ) {}

    public function id(): int {
        return $this->id;
    }

    /** Gazelle re-reads the row from the database; nothing to re-read here. */
    public function flush(): static {
        return $this;
    }

    /** The info-hash in the form Ocelot's update and report take it:
     *  every byte that is not unreserved in a URL percent-encoded. */
    public function infohashEncoded(): string {
        return rawurlencode($this->infoHash);
    }
}

class Torrent extends TorrentAbstract {}

/** A user: id, passkey (Gazelle's "announce key"), and the two flags the
 *  tracker calls send. */
class User {
    public function __construct(
        private int $id,
        private string $passkey,
        private bool $visible = true,
        private bool $canLeech = true,
    ) {}

    public function id(): int {
        return $this->id;
    }

    public function announceKey(): string {
        return $this->passkey;
    }

    public function isVisible(): bool {
        return $this->visible;
    }

    public function canLeech(): bool {
        return $this->canLeech;
    }

    public function setCanLeech(bool $canLeech): void {
        $this->canLeech = $canLeech;
    }

    public function setPasskey(string $passkey): void {
        $this->passkey = $passkey;
    }
}

namespace Gazelle\Util;

/** Gazelle posts a message to its IRC bot when an update fails; here it
 *  goes into the transcript as a comment. */
class Irc {
    public static function sendMessage(string $target, string $message): bool {
        \Recorder::comment("Gazelle's IRC alert to $target: $message");
        return true;
    }
}
