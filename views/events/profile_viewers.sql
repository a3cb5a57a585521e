-- @key: view_id
-- @enrich: as_of_processing
-- @description: Who viewed your profile (seed 004): each profile view with the viewer's email and payment verification as they were when the view was processed.
--
-- As of processing: each event is enriched once, with the users and payment_info rows current in
-- the batch that ingests it, and never again. "Bob viewed your profile" keeps saying what Bob's
-- account was then, even after Bob changes his email. Without `@enrich: as_of_processing` (the
-- default, table_table) every past view would be rewritten with Bob's new email.
SELECT pv.view_id,
       pv.viewed_user,
       pv.viewed_at,
       pv.viewer,
       u.email AS viewer_email,
       coalesce((SELECT bool_or(p.verified) FROM payment_info p WHERE p.user_id = u.id), false) AS viewer_verified
FROM profile_views pv
LEFT JOIN users u ON u.username = pv.viewer
