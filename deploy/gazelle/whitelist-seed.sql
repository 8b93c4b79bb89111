-- The client whitelist Gazelle seeds: the rows of
-- misc/phinx/seeds/ClientWhitelistSeeder.php:9-40 (OPSnet/Gazelle 71b4515),
-- in its order, so they get ids 1 to 32 as its `phinx seed:run` gives
-- them (checked by running that seeder after the migrations). Ocelot reads
-- only peer_id, a prefix of the 20-byte peer id a client sends; an empty
-- table allows every client. Load after deploy/gazelle/schema.sql.

INSERT INTO `xbt_client_whitelist` (`peer_id`, `vstring`) VALUES
  ('-DE12', 'Deluge 1.2.x'),
  ('-DE13', 'Deluge 1.3.x'),
  ('-DE2', 'Deluge 2.x'),
  ('-FL148', 'Flud 1.4.8'),
  ('-FL149', 'Flud 1.4.9'),
  ('-HL04', 'Halite 0.4.x'),
  ('-KT4', 'KTorrent 4.x'),
  ('-KT5', 'KTorrent 5.x'),
  ('-LT', 'Libtorrent (Rasterbar)'),
  ('-lt0B', 'libtorrent (rtorrent) 0.11.x'),
  ('-lt0C', 'libtorrent (rtorrent) 0.12.x'),
  ('-lt0D', 'libtorrent (rtorrent) 0.13.x'),
  ('M', 'Mainline'),
  ('-qB2', 'qBittorrent 2.x'),
  ('-qB3', 'qBittorrent 3.x'),
  ('-qB40', 'qBittorrent 4.0.x'),
  ('-qB41', 'qBittorrent 4.1.x'),
  ('-qB42', 'qBittorrent 4.2.x'),
  ('-TR154', 'Transmission 1.5.4'),
  ('-TR17', 'Transmission 1.7.x'),
  ('-TR19', 'Transmission 1.9.x'),
  ('-TR2', 'Transmission 2.x'),
  ('-TR30', 'Transmission 3.0.x'),
  ('-UT18', 'uTorrent 1.8.x'),
  ('-UT204', 'uTorrent 2.0.4'),
  ('-UT21', 'uTorrent 2.1.x'),
  ('-UT22', 'uTorrent 2.2.x'),
  ('-UT353', 'uTorrent 3.5.3'),
  ('-UT354', 'uTorrent 3.5.4'),
  ('-UT355', 'uTorrent 3.5.5'),
  ('-UM15', 'uTorrent Mac 1.5.x'),
  ('-UM18', 'uTorrent Mac 1.8.x');
