-- The evaluation sample's music catalogue: artists, albums, tracks and playlists.
-- Playlist 4 is empty; a track can be on several playlists.
CREATE TABLE artists (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE albums (id INTEGER PRIMARY KEY, title TEXT NOT NULL, artist_id INTEGER NOT NULL REFERENCES artists(id), year INTEGER NOT NULL);
CREATE TABLE tracks (
    id INTEGER PRIMARY KEY,
    album_id INTEGER NOT NULL REFERENCES albums(id),
    title TEXT NOT NULL,
    genre TEXT NOT NULL,
    milliseconds INTEGER NOT NULL
);
CREATE TABLE playlists (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE playlist_tracks (
    playlist_id INTEGER NOT NULL REFERENCES playlists(id),
    track_id INTEGER NOT NULL REFERENCES tracks(id),
    PRIMARY KEY (playlist_id, track_id)
);
INSERT INTO artists VALUES
    (1, 'Nina Vale', 'Brazil'),
    (2, 'The Quiet Hours', 'Ireland'),
    (3, 'Kojo Mensah', 'Ghana'),
    (4, 'Luz Moreno', 'Brazil');
INSERT INTO albums VALUES
    (1, 'Tide Lines', 1, 2019),
    (2, 'Harbour', 1, 2022),
    (3, 'Small Rooms', 2, 2020),
    (4, 'Afterglow', 3, 2021),
    (5, 'Sol', 4, 2023);
INSERT INTO tracks VALUES
    (1, 1, 'Tide Lines I', 'folk', 190000),
    (2, 1, 'Tide Lines II', 'bossa nova', 215000),
    (3, 1, 'Tide Lines III', 'bossa nova', 187000),
    (4, 2, 'Harbour I', 'bossa nova', 224000),
    (5, 2, 'Harbour II', 'bossa nova', 262000),
    (6, 2, 'Harbour III', 'bossa nova', 163000),
    (7, 3, 'Small Rooms I', 'highlife', 306000),
    (8, 3, 'Small Rooms II', 'folk', 315000),
    (9, 3, 'Small Rooms III', 'folk', 216000),
    (10, 4, 'Afterglow I', 'highlife', 315000),
    (11, 4, 'Afterglow II', 'highlife', 246000),
    (12, 4, 'Afterglow III', 'highlife', 282000),
    (13, 4, 'Afterglow IV', 'highlife', 217000),
    (14, 4, 'Afterglow V', 'highlife', 294000),
    (15, 5, 'Sol I', 'bossa nova', 287000),
    (16, 5, 'Sol II', 'pop', 222000),
    (17, 5, 'Sol III', 'pop', 286000);
INSERT INTO playlists VALUES
    (1, 'Morning'),
    (2, 'Focus'),
    (3, 'Road trip'),
    (4, 'Empty for now');
INSERT INTO playlist_tracks VALUES
    (1, 2),
    (1, 3),
    (1, 4),
    (1, 5),
    (1, 6),
    (1, 8),
    (1, 9),
    (1, 10),
    (1, 15),
    (1, 16),
    (2, 6),
    (2, 8),
    (2, 12),
    (2, 14),
    (2, 15),
    (2, 17),
    (3, 1),
    (3, 2),
    (3, 6),
    (3, 8),
    (3, 9),
    (3, 10),
    (3, 13),
    (3, 14);
