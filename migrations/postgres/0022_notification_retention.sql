-- Read notifications are pruned after NOTIFICATION_RETENTION_DAYS (issue #32): the job finds
-- them by when they were read.
CREATE INDEX idx_notifications_read_at ON notifications (read_at) WHERE is_read = TRUE;
