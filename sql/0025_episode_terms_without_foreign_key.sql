-- 0025_episode_terms_without_foreign_key: episode postings lose their
-- foreign key to memory.episodes, as fact postings never had one
-- (sql/0010).  tg_episodes__terms (functions/076) now deletes an episode's
-- postings itself, by their key from its content_tsv, in the statement that
-- deletes the episode.
--
-- The key cost a referential check per posting, about ten per episode,
-- each a query PostgreSQL plans once per session and keeps.  A session
-- whose first ingest ran on an empty install planned that check on a table
-- where every index of memory.episodes costs the same, and took
-- episodes_project_idx with the org alone as its condition: from then on
-- each check read the org's every episode (1,000-1,100 rows per posting at
-- 1,100 episodes).  An ingest of 100 messages grew from 53 ms to 433 ms
-- over the first 2,000 episodes of a new install with no ANALYZE, and
-- stayed so for that session until an ANALYZE of memory.episodes.
-- Postings are written only by that trigger, from the rows of the episodes
-- the same statement inserts, so the key guarded nothing the trigger does
-- not; what it did besides, the cascade, the trigger does now.
alter table memory_internal.episode_terms drop constraint episode_terms_org_id_episode_id_fkey;

-- It served only the cascade and the owner's rewrite of an episode, which
-- find an episode's postings by key now; each posting paid an entry in it.
drop index memory_internal.episode_terms_episode_idx;
