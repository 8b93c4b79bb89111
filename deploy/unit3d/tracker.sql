-- The tracker's one table in the site's database: the last flush each
-- tracker committed, for exactly-once flushes. A flush is one transaction
-- that locks its tracker's row, checks the stored sequence number against
-- its own, writes its rows and stores its number. A flush retried after a
-- lost COMMIT acknowledgement finds its number already stored and writes
-- nothing, so no delta is ever added twice.
--
-- The tracker creates it itself when it is missing (this same statement,
-- run at connect): loading this file is only needed where the tracker's
-- database user may not create tables.
CREATE TABLE IF NOT EXISTS `tracker_flushes` (
  -- The tracker's configured id: one row per tracker process writing here.
  `tracker_id` varchar(64) NOT NULL,
  -- The number of the last flush committed; they increase by one.
  `sequence` bigint unsigned NOT NULL,
  `flushed_at` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`tracker_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
