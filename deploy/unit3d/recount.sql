-- Run once when switching a UNIT3D site over from UNIT3D-Announce, after it
-- has stopped and before the tracker starts (docs/OPERATIONS.md, "Switching
-- a UNIT3D site over").
--
-- UNIT3D-Announce keeps its peers in memory: when it forgets a silent one it
-- takes it off its torrent's counts but leaves its row active. The tracker
-- keeps each torrent's seeders and leechers equal to its active, visible
-- peer rows, moving them only with the rows it changes; so the rows and the
-- counts must agree once, here. Peers silent for over two hours
-- (UNIT3D-Announce's ACTIVE_PEER_TTL: set the same as
-- private.active_peer_ttl_secs) are made inactive, then every torrent's
-- counts are recounted from the rows. Their totals stay in the rows: a peer
-- that comes back is credited from them.

START TRANSACTION;

UPDATE peers SET active = 0
  WHERE active AND updated_at < NOW() - INTERVAL 7200 SECOND;

UPDATE torrents t
  LEFT JOIN (
    SELECT torrent_id,
           SUM(seeder) AS seeders,
           SUM(NOT seeder) AS leechers
    FROM peers
    WHERE active AND visible
    GROUP BY torrent_id
  ) p ON p.torrent_id = t.id
  SET t.seeders = COALESCE(p.seeders, 0),
      t.leechers = COALESCE(p.leechers, 0);

COMMIT;
