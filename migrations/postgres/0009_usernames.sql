-- Usernames are unique whatever their case (issue 19): `EnumUser` cannot sit beside
-- `enumuser`, by registration or by rename. Login finds them case-insensitively too.
CREATE UNIQUE INDEX uq_users_username_lower ON users (LOWER(username));
