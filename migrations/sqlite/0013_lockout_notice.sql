-- When wrong passwords spend an account's login budget its owner is told by e-mail, at most
-- once an hour (issue 31, D6). The last notice's time is kept on the account: a conditional
-- update against the service clock picks one notice among concurrent instances, where a cache
-- key's expiry would follow the cache server's clock instead.
ALTER TABLE users ADD COLUMN lockout_notified_at TEXT;
