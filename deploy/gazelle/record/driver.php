<?php
// Gazelle's calls to Ocelot, made by Gazelle's own app/Tracker.php, and a
// few BitTorrent clients' announces and scrapes between them, for
// deploy/gazelle/record/record to record on the wire (wire.py sits between
// this and Ocelot). Written for that (issue 43); only Tracker.php and
// app/Enum/LeechType.php are Gazelle's, read at run time from the
// directory GAZELLE_APP (the record script extracts them from Gazelle's
// repository; they are not kept here).
//
//   php driver.php seed            the SQL of the site's rows, loaded after schema.sql
//   php driver.php run main        the calls, against the secrets Ocelot has
//   php driver.php run wrong-keys  two calls made with the wrong secrets
//
// `run` reads RECORD_TRACKER_HOST, _PORT (the proxy), _NAME (the Host
// header), _SECRET, _REPORTKEY (Gazelle's TRACKER_* settings), and
// RECORD_CONTROL (the proxy's control port) and GAZELLE_APP.
//
// The site: users 1 to 7 and torrents 1 to 6 (driver.php seed). Ocelot loads at
// its start the users that are enabled and the torrents that have a
// torrents_leech_stats row; user 6 (not enabled yet) and torrent 4 (no
// stats row yet) are in the database, as they are when Gazelle calls
// add_user and add_torrent, but reach Ocelot only through those calls.
// The clients: qBittorrent 4.2.5 (peer id -qB4250-, on Gazelle's seeded
// whitelist as -qB42) and Transmission 2.94 (-TR2940-, as -TR2), all from
// 127.0.0.1, each peer on a port of its own.

declare(strict_types=1);

/** The passkey of user $id: 32 letters of the alphabet Gazelle's
 *  randomString() draws passkeys from (a-k, m-z, A-G). */
function passkey(int $id): string {
    $letter = chr(ord('A') + $id - 1);
    return 'user' . $letter . str_repeat(strtolower($letter), 27);
}

const NEW_PASSKEY_2 = 'newkeyBbbbbbbbbbbbbbbbbbbbbbbbbb';
const UNKNOWN_PASSKEY = 'unknownkeyzzzzzzzzzzzzzzzzzzzzzz';

/** The info-hash of torrent $id (20 bytes). */
function infohash(int $id): string {
    return sha1("ocelot transcript torrent $id", true);
}

/** Torrent 7 is never registered anywhere. */
const UNREGISTERED = 7;

/** Users: [id, enabled, can_leech, visible]. */
const USERS = [
    [1, '1', 1, '1'],  // uploader and seeder
    [2, '1', 1, '1'],  // leecher; changes passkey
    [3, '1', 1, '1'],  // spends a freeleech token
    [4, '1', 1, '1'],  // loses leeching (refreshUser)
    [5, '1', 1, '0'],  // paranoid (Visible 0: Ocelot's "protected"); removed
    [6, '0', 1, '1'],  // registers during the run (addUser); then disabled
    [7, '1', 1, '1'],  // disabled with 6 (remove_users)
];

/** Torrents: [id, FreeTorrent, has a torrents_leech_stats row]. */
const TORRENTS = [
    [1, '0', true],
    [2, '0', true],   // the token's
    [3, '0', true],   // deleted with reason 3 (Bad Folder Names)
    [4, '0', false],  // uploaded during the run (addTorrent)
    [5, '0', true],   // deleted with no reason (Gazelle's default -1)
    [6, '0', true],   // deleted with a reason code Ocelot has no text for
];

function seed_sql(): string {
    $hex = fn(string $bytes) => strtoupper(bin2hex($bytes));
    $out = "-- The site's rows for deploy/gazelle/record (written by driver.php seed;\n"
        . "-- load after deploy/gazelle/schema.sql).\n"
        . "INSERT INTO torrents_group (ID, CategoryID, Name, WikiBody, WikiImage)\n"
        . "  VALUES (1, 1, 'The transcript', '', '');\n";
    foreach (USERS as [$id, $enabled, $canLeech, $visible]) {
        $out .= sprintf(
            "INSERT INTO users_main (ID, Username, Email, PassHash, IP, Enabled, Visible, can_leech,\n"
            . "  PermissionID, torrent_pass, auth_key, stylesheet_id)\n"
            . "  VALUES (%d, 'user%d', 'user%d@example.test', 'x', '192.0.2.%d', '%s', '%s', %d, 2, '%s',\n"
            . "  'auth%d', 1);\n",
            $id, $id, $id, $id, $enabled, $visible, $canLeech, passkey($id), $id
        );
    }
    foreach (TORRENTS as [$id, $free, $stats]) {
        $out .= sprintf(
            "INSERT INTO torrents (ID, GroupID, UserID, info_hash, FileCount, FileList, Size, FreeTorrent)\n"
            . "  VALUES (%d, 1, 1, X'%s', 1, 'f', 1000, '%s');\n",
            $id, $hex(infohash($id)), $free
        );
        if ($stats) {
            $out .= "INSERT INTO torrents_leech_stats (TorrentID) VALUES ($id);\n";
        }
    }
    // The token row Gazelle writes when a token is spent (after add_token).
    $out .= "INSERT INTO users_freeleeches (UserID, TorrentID, Time, Expired) VALUES (3, 2, NOW(), 1);\n";
    return $out;
}

/** The recording proxy's control line: notes that label what goes over
 *  the wire next, and what Gazelle's code made of it. */
final class Recorder {
    /** @var resource */
    private static $control;

    public static function open(int $port): void {
        $socket = fsockopen('127.0.0.1', $port, $errno, $error);
        if ($socket === false) {
            throw new RuntimeException("control port $port: $error");
        }
        self::$control = $socket;
    }

    public static function send(array $message): void {
        fwrite(self::$control, json_encode($message, JSON_UNESCAPED_SLASHES) . "\n");
        if (fgets(self::$control) !== "ok\n") {
            throw new RuntimeException('the recorder did not answer');
        }
    }

    public static function comment(string $text): void {
        self::send(['note' => 'comment', 'text' => $text]);
    }

    public static function call(string $who, string $label): void {
        self::send(['note' => 'call', 'who' => $who, 'label' => $label]);
    }

    public static function returned(mixed $value): void {
        self::send(['note' => 'return', 'value' => $value]);
    }
}

/** One method of Gazelle's Tracker, labelled as Gazelle's code calls it;
 *  what it returns goes into the transcript. */
function gazelle(string $label, callable $call): mixed {
    Recorder::call('gazelle', $label);
    $value = $call();
    // The jemalloc report is long and changes with every run: its first
    // line and its length stand for it.
    if ($label === 'infoMemoryAlloc()' && is_string($value)) {
        $value = ['first line' => strtok($value, "\n"), 'length' => strlen($value)];
    }
    Recorder::returned($value);
    return $value;
}

/** A client's request: $target and headers sent as they are, on a
 *  connection of its own, the answer read to its end. */
function client(string $label, string $target, array $headers): string {
    Recorder::call('client', $label);
    $socket = fsockopen(TRACKER_HOST, TRACKER_PORT, $errno, $error);
    if ($socket === false) {
        throw new RuntimeException("client: $error");
    }
    $request = "GET $target HTTP/1.1\r\nHost: " . TRACKER_NAME . "\r\n";
    foreach ($headers as $name => $value) {
        $request .= "$name: $value\r\n";
    }
    fwrite($socket, "$request\r\n");
    $answer = stream_get_contents($socket);
    fclose($socket);
    return (string)$answer;
}

/** A peer: the client it runs and its port. */
final class Peer {
    public function __construct(
        public string $peerId,
        public int $port,
        public string $userAgent,
    ) {}

    public static function qbittorrent(string $tail, int $port): Peer {
        return new Peer('-qB4250-' . $tail, $port, 'qBittorrent/4.2.5');
    }

    public static function transmission(string $tail, int $port): Peer {
        return new Peer('-TR2940-' . $tail, $port, 'Transmission/2.94');
    }
}

/** An announce as qBittorrent (libtorrent 1.2) and Transmission send it:
 *  /{passkey}/announce?..., every byte of the hashes that is not unreserved
 *  percent-encoded. $set replaces or adds parameters, a null value drops
 *  one. */
function announce(string $label, string $passkey, int $torrent, Peer $peer, array $set = [], array $headers = []): string {
    $params = [
        'info_hash' => rawurlencode(infohash($torrent)),
        'peer_id' => rawurlencode($peer->peerId),
        'port' => (string)$peer->port,
        'uploaded' => '0',
        'downloaded' => '0',
        'left' => '1000',
        'corrupt' => '0',
        'key' => sprintf('%08X', crc32($peer->peerId)),
        'event' => 'started',
        'numwant' => '200',
        'compact' => '1',
        'no_peer_id' => '1',
        'supportcrypto' => '1',
        'redundant' => '0',
    ];
    foreach ($set as $name => $value) {
        if ($value === null) {
            unset($params[$name]);
        } else {
            $params[$name] = $value;
        }
    }
    $query = implode('&', array_map(fn($k, $v) => "$k=$v", array_keys($params), $params));
    return client($label, "/$passkey/announce?$query", $headers + [
        'User-Agent' => $peer->userAgent,
        'Accept-Encoding' => 'gzip',
        'Connection' => 'close',
    ]);
}

/** A scrape of $torrents in one request. */
function scrape(string $label, string $passkey, array $torrents, array $headers = []): string {
    $query = implode('&', array_map(fn($id) => 'info_hash=' . rawurlencode(infohash($id)), $torrents));
    return client($label, "/$passkey/scrape?$query", $headers + [
        'User-Agent' => 'qBittorrent/4.2.5',
        'Connection' => 'close',
    ]);
}

function run_main(Gazelle\Tracker $tracker): void {
    $user = [];
    foreach (USERS as [$id, , $canLeech, $visible]) {
        $user[$id] = new Gazelle\User($id, passkey($id), $visible === '1', $canLeech === 1);
    }
    $torrent = [];
    foreach (TORRENTS as [$id]) {
        $torrent[$id] = new Gazelle\Torrent($id, infohash($id));
    }
    $seeder = Peer::qbittorrent('aaaaaaaaaaaa', 50001);
    $leecher2 = Peer::transmission('bbbbbbbbbbbb', 50002);
    $leecher3 = Peer::qbittorrent('cccccccccccc', 50003);
    $peer4 = Peer::qbittorrent('dddddddddddd', 50004);
    $peer6 = Peer::transmission('ffffffffffff', 50006);

    Recorder::comment('Ocelot as it starts: users 1-5 and 7, torrents 1-3, 5 and 6, the 32 clients of Gazelle\'s whitelist seed.');
    gazelle('info()', fn() => $tracker->info());

    Recorder::comment('A user registers (UserCreator, AutoEnable: addUser), and staff look at the tracker\'s view of them (ocelot_info, user.php: userReport).');
    gazelle('addUser(user 6)', fn() => $tracker->addUser($user[6]));
    gazelle('userReport(user 6)', fn() => $tracker->userReport($user[6]));
    gazelle('userReport(user 5, paranoid)', fn() => $tracker->userReport($user[5]));

    Recorder::comment('An upload (upload_handle.php: addTorrent), seeded by its uploader and joined by two leechers.');
    gazelle('addTorrent(torrent 4)', fn() => $tracker->addTorrent($torrent[4]));
    announce('announce: user 1 seeds torrent 4 (event=started, left=0)', passkey(1), 4, $seeder, ['left' => '0']);
    announce('announce: user 6 leeches torrent 4 (event=started)', passkey(6), 4, $peer6);
    announce('announce: user 2 leeches torrent 4 (event=started)', passkey(2), 4, $leecher2);
    announce('announce: user 2 again, 500 bytes down (no event)', passkey(2), 4, $leecher2, ['event' => null, 'downloaded' => '500', 'left' => '500']);
    announce('announce: user 1 again, 500 bytes up (no event)', passkey(1), 4, $seeder, ['event' => null, 'uploaded' => '500', 'left' => '0']);
    scrape('scrape: torrents 4, 1 and one never registered', passkey(2), [4, 1, UNREGISTERED]);
    scrape('scrape: torrent 4, Accept-Encoding: gzip', passkey(2), [4], ['Accept-Encoding' => 'gzip']);

    Recorder::comment('Freeleech set and unset (TGroup, Collage, FeaturedAlbum through Manager\\Torrent::setListFreeleech: modifyTorrent), then the 2.1.5 torrent report (ocelot_info.php: torrentReport).');
    gazelle('modifyTorrent(torrent 4, LeechType::Free)', fn() => $tracker->modifyTorrent($torrent[4], Gazelle\Enum\LeechType::Free));
    gazelle('modifyTorrent(torrent 4, LeechType::Neutral)', fn() => $tracker->modifyTorrent($torrent[4], Gazelle\Enum\LeechType::Neutral));
    gazelle('modifyTorrent(torrent 4, LeechType::Normal)', fn() => $tracker->modifyTorrent($torrent[4], Gazelle\Enum\LeechType::Normal));
    gazelle('torrentReport(torrent 4)', fn() => $tracker->torrentReport($torrent[4]));

    Recorder::comment('A freeleech token spent on a download (Download: addToken), the download completed with it (Ocelot calls back to expire it), then the token expired by Gazelle (Torrent::expireToken: removeToken).');
    gazelle('addToken(torrent 2, user 3)', fn() => $tracker->addToken($torrent[2], $user[3]));
    announce('announce: user 3 starts torrent 2 with the token', passkey(3), 2, $leecher3);
    announce('announce: user 3 completes torrent 2 (event=completed, 1000 bytes down)', passkey(3), 2, $leecher3, ['event' => 'completed', 'downloaded' => '1000', 'left' => '0']);
    Recorder::send(['wait' => 'site', 'count' => 1, 'timeout' => 15]);
    gazelle('removeToken(torrent 2, user 3)', fn() => $tracker->removeToken($torrent[2], $user[3]));

    Recorder::comment('A passkey reset (user/edit_handle.php, moderate_handle.php: modifyPasskey).');
    gazelle('modifyPasskey(user 2, old -> new)', fn() => $tracker->modifyPasskey(passkey(2), NEW_PASSKEY_2));
    $user[2]->setPasskey(NEW_PASSKEY_2);
    announce('announce: user 2 with the old passkey', passkey(2), 4, $leecher2, ['event' => null, 'downloaded' => '600', 'left' => '400']);
    announce('announce: user 2 with the new passkey', NEW_PASSKEY_2, 4, $leecher2, ['event' => null, 'downloaded' => '600', 'left' => '400']);

    Recorder::comment('Ratio watch takes leeching away (Manager\\User, moderate_handle.php: refreshUser), an admin_tracker user saves the moderation form (traceUser, 2.1.5), and staff look (userReport, isTraced).');
    $user[4]->setCanLeech(false);
    gazelle('refreshUser(user 4, can_leech 0)', fn() => $tracker->refreshUser($user[4]));
    gazelle('traceUser(user 4, true)', fn() => $tracker->traceUser($user[4], true));
    gazelle('userReport(user 4)', fn() => $tracker->userReport($user[4]));
    gazelle('isTraced(user 4)', fn() => $tracker->isTraced($user[4]));
    announce('announce: user 4 leeches torrent 1', passkey(4), 1, $peer4);
    announce('announce: user 4 seeds torrent 1 (left=0)', passkey(4), 1, $peer4, ['left' => '0']);
    announce('announce: user 1 leeches torrent 1 (sees user 4 seeding)', passkey(1), 1, $seeder);

    Recorder::comment('Users disabled: one by a moderator (moderate_handle.php: removeUser), two at once (Manager\\User::disableUserList: update remove_users, the passkeys concatenated).');
    gazelle('removeUser(user 5)', fn() => $tracker->removeUser($user[5]));
    announce('announce: user 5, removed', passkey(5), 1, Peer::qbittorrent('eeeeeeeeeeee', 50005));
    gazelle('userReport(user 5, removed)', fn() => $tracker->userReport($user[5]));
    gazelle("update('remove_users', users 6 and 7)", fn() => $tracker->update('remove_users', ['passkeys' => disabled_passkeys([passkey(6), passkey(7)])]));
    announce('announce: user 7, removed', passkey(7), 1, Peer::transmission('gggggggggggg', 50007));
    announce('announce: user 6, removed, stops torrent 4', passkey(6), 4, $peer6, ['event' => 'stopped']);

    Recorder::comment('The client whitelist edited (tools/managers/whitelist_alter.php: addWhitelist, modifyWhitelist, removeWhitelist).');
    $xx1 = new Peer('-XX0100-xxxxxxxxxxxx', 50008, 'XX/1.0');
    $xx2 = new Peer('-XX0200-xxxxxxxxxxxx', 50009, 'XX/2.0');
    announce('announce: a client off the whitelist (-XX0100-)', passkey(1), 1, $xx1);
    gazelle("addWhitelist('-XX01')", fn() => $tracker->addWhitelist('-XX01'));
    announce('announce: -XX0100- once whitelisted', passkey(1), 1, $xx1);
    gazelle("modifyWhitelist('-XX01', '-XX02')", fn() => $tracker->modifyWhitelist('-XX01', '-XX02'));
    announce('announce: -XX0100- once its entry became -XX02 (a new peer id: its old peer stays listed)', passkey(1), 1, new Peer('-XX0100-yyyyyyyyyyyy', 50010, 'XX/1.0'));
    announce('announce: -XX0200-', passkey(1), 1, $xx2);
    gazelle("removeWhitelist('-XX02')", fn() => $tracker->removeWhitelist('-XX02'));
    announce('announce: -XX0200- once its entry is gone (a new peer id)', passkey(1), 1, new Peer('-XX0200-yyyyyyyyyyyy', 50011, 'XX/2.0'));

    Recorder::comment('The announce interval and jitter changed (ocelot_info.php: modifyAnnounceInterval, modifyAnnounceJitter), then seen in the stats and an announce.');
    gazelle('modifyAnnounceInterval(900)', fn() => $tracker->modifyAnnounceInterval(900));
    gazelle('modifyAnnounceJitter(30)', fn() => $tracker->modifyAnnounceJitter(30));
    gazelle('info()', fn() => $tracker->info());
    announce('announce: user 1 seeds torrent 2', passkey(1), 2, $seeder, ['left' => '0']);

    Recorder::comment('Torrents deleted (Torrent::remove: update delete_torrent with the report\'s tracker reason, -1 by default), then announced and scraped.');
    gazelle("update('delete_torrent', torrent 3, reason 3)", fn() => $tracker->update('delete_torrent', ['id' => 3, 'info_hash' => $torrent[3]->infohashEncoded(), 'reason' => 3]));
    gazelle("update('delete_torrent', torrent 5, reason -1)", fn() => $tracker->update('delete_torrent', ['id' => 5, 'info_hash' => $torrent[5]->infohashEncoded(), 'reason' => -1]));
    gazelle("update('delete_torrent', torrent 6, reason 99)", fn() => $tracker->update('delete_torrent', ['id' => 6, 'info_hash' => $torrent[6]->infohashEncoded(), 'reason' => 99]));
    announce('announce: torrent 3, deleted for Bad Folder Names', passkey(1), 3, $seeder, ['left' => '0']);
    announce('announce: torrent 5, deleted with no reason', passkey(1), 5, $seeder, ['left' => '0']);
    announce('announce: torrent 6, deleted with reason 99', passkey(1), 6, $seeder, ['left' => '0']);
    scrape('scrape: torrents 3 (deleted) and 1', passkey(1), [3, 1]);

    Recorder::comment('Clients refused, in the order Ocelot checks.');
    announce('announce: an unknown passkey', UNKNOWN_PASSKEY, 1, $seeder);
    scrape('scrape: an unknown passkey', UNKNOWN_PASSKEY, [1]);
    announce('announce: a torrent never registered', passkey(1), UNREGISTERED, $seeder);
    announce('announce: compact=0', passkey(1), 1, $seeder, ['compact' => '0']);
    announce('announce: no compact', passkey(1), 1, $seeder, ['compact' => null]);
    announce('announce: no peer_id', passkey(1), 1, $seeder, ['peer_id' => null]);
    announce('announce: a peer_id of 19 bytes', passkey(1), 1, $seeder, ['peer_id' => rawurlencode('-qB4250-aaaaaaaaaaa')]);

    Recorder::comment('Other shapes a client sends: an IPv6 address in ip=, X-Forwarded-For, a stop, no query, a request too short.');
    announce('announce: ip=2001:db8::1 (IPv6)', NEW_PASSKEY_2, 1, Peer::transmission('hhhhhhhhhhhh', 50012), ['ip' => '2001:db8::1']);
    announce('announce: X-Forwarded-For: 198.51.100.7, 10.0.0.1', NEW_PASSKEY_2, 1, Peer::transmission('iiiiiiiiiiii', 50013), [], ['X-Forwarded-For' => '198.51.100.7, 10.0.0.1']);
    announce('announce: user 1 stops torrent 1 (event=stopped)', passkey(1), 1, $seeder, ['event' => 'stopped', 'left' => '0']);
    client('no query: /{passkey}/announce', '/' . passkey(1) . '/announce', ['Connection' => 'close']);
    client('a request of under 60 bytes in all', '/announce', []);

    Recorder::comment('Staff pages: the tracker\'s statistics and its allocator (ocelot_info.php: info, infoMemoryAlloc), and the user report of a key Ocelot does not know.');
    gazelle('info()', fn() => $tracker->info());
    gazelle('infoMemoryAlloc()', fn() => $tracker->infoMemoryAlloc());
    gazelle('userReport(user 2 by its old passkey)', fn() => $tracker->userReport(new Gazelle\User(2, passkey(2))));
}

/** Manager\User::disableUserList sends the passkeys concatenated, in
 *  batches that stay under Ocelot's 4 KiB request; two fit in one. */
function disabled_passkeys(array $passkeys): string {
    return implode('', $passkeys);
}

function run_wrong_keys(Gazelle\Tracker $tracker): void {
    Recorder::comment('A site whose TRACKER_SECRET and TRACKER_REPORTKEY are not Ocelot\'s: what Gazelle makes of the refusals.');
    gazelle('addTorrent(torrent 4), wrong TRACKER_SECRET', fn() => $tracker->addTorrent(new Gazelle\Torrent(4, infohash(4))));
    gazelle('info(), wrong TRACKER_REPORTKEY', fn() => $tracker->info());
}

function main(array $argv): int {
    $mode = $argv[1] ?? '';
    if ($mode === 'seed') {
        echo seed_sql();
        return 0;
    }
    if ($mode !== 'run' || !in_array($argv[2] ?? '', ['main', 'wrong-keys'], true)) {
        fwrite(STDERR, "usage: php driver.php seed | run main | run wrong-keys\n");
        return 2;
    }
    // What Tracker.php reads from Gazelle's lib/config.php.
    foreach (['TRACKER_HOST', 'TRACKER_PORT', 'TRACKER_NAME', 'TRACKER_SECRET', 'TRACKER_REPORTKEY'] as $name) {
        $value = getenv("RECORD_$name");
        if ($value === false) {
            fwrite(STDERR, "driver.php: RECORD_$name is not set\n");
            return 2;
        }
        define($name, $name === 'TRACKER_PORT' ? (int)$value : $value);
    }
    define('DISABLE_TRACKER', false);
    define('DEBUG_TRACKER_TOKEN_EXPIRE', false);
    define('IRC_CHAN_DEV', '#dev');
    $app = getenv('GAZELLE_APP');
    if ($app === false || !is_file("$app/Tracker.php") || !is_file("$app/Enum/LeechType.php")) {
        fwrite(STDERR, "driver.php: GAZELLE_APP must hold Gazelle's app/Tracker.php and app/Enum/LeechType.php\n");
        return 2;
    }
    require __DIR__ . '/stubs.php';
    require "$app/Enum/LeechType.php";
    require "$app/Tracker.php";
    Gazelle\Base::initialize(new Gazelle\Cache());
    Recorder::open((int)getenv('RECORD_CONTROL'));
    $tracker = new Gazelle\Tracker();
    if ($argv[2] === 'main') {
        run_main($tracker);
    } else {
        run_wrong_keys($tracker);
    }
    return 0;
}

exit(main($argv));
