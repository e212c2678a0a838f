-- 0007_episode_text_stats: BM25 collection statistics for episodes already
-- stored.  From now on the trigger tg_episodes__text_stats (functions/076)
-- keeps the counters episodes_ingested and episode_tokens_ingested; this
-- counts what was ingested before it existed.  The owner reads across orgs
-- here only, with forced row-level security lifted inside this transaction.
alter table memory.episodes no force row level security;
alter table memory_internal.counters no force row level security;

insert into memory_internal.counters as c (org_id, project_id, metric, shard, value)
select e.org_id, e.project_id, m.metric, 0, case m.metric when 'episodes_ingested' then count(*)
                                                           else sum(e.token_count) end
  from memory.episodes e
 cross join (values ('episodes_ingested'), ('episode_tokens_ingested')) m(metric)
 group by e.org_id, e.project_id, m.metric
on conflict (org_id, project_id, metric, shard) do update set value = c.value + excluded.value;

alter table memory.episodes force row level security;
alter table memory_internal.counters force row level security;
