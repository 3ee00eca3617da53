-- Notifications and platform figures at scale (issue #32): each user's notification counts
-- kept by triggers (a page's total and the unread badge without counting the user's rows),
-- the notification list's orders under indexes, and the growth view's date ranges indexed.
CREATE TABLE notification_counts (
    user_id INTEGER NOT NULL PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
    total   INTEGER NOT NULL,
    unread  INTEGER NOT NULL
);
INSERT INTO notification_counts (user_id, total, unread)
    SELECT user_id, COUNT(*), SUM(CASE WHEN is_read THEN 0 ELSE 1 END) FROM notifications GROUP BY user_id;
CREATE TRIGGER notifications_count_insert AFTER INSERT ON notifications BEGIN
    INSERT INTO notification_counts (user_id, total, unread)
        VALUES (NEW.user_id, 1, CASE WHEN NEW.is_read THEN 0 ELSE 1 END)
        ON CONFLICT (user_id) DO UPDATE SET total = total + 1, unread = unread + excluded.unread;
END;
CREATE TRIGGER notifications_count_delete AFTER DELETE ON notifications BEGIN
    UPDATE notification_counts
       SET total = total - 1, unread = unread - CASE WHEN OLD.is_read THEN 0 ELSE 1 END
     WHERE user_id = OLD.user_id;
END;
CREATE TRIGGER notifications_count_read AFTER UPDATE OF is_read ON notifications
    WHEN OLD.is_read IS NOT NEW.is_read BEGIN
    UPDATE notification_counts
       SET unread = unread + CASE WHEN NEW.is_read THEN 0 ELSE 1 END
                           - CASE WHEN OLD.is_read THEN 0 ELSE 1 END
     WHERE user_id = NEW.user_id;
END;
DROP INDEX idx_notifications_user_created;
CREATE INDEX idx_notifications_user_newest ON notifications (user_id, created_at DESC, id DESC);
CREATE INDEX idx_notifications_user_unread_newest ON notifications (user_id, created_at DESC, id DESC)
    WHERE is_read = FALSE;

CREATE INDEX idx_projects_completed_at ON projects (completed_at) WHERE status = 'completed';
CREATE INDEX idx_projects_cancelled_at ON projects (cancelled_at) WHERE status = 'cancelled';
CREATE INDEX idx_projects_assigned_at ON projects (assigned_at);
