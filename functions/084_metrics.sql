-- Operators' reads across orgs (no org scope).  CREATE OR REPLACE only: re-applied on every migrate.

--------------------------------------------------------------------------
-- Operators: /metrics
--------------------------------------------------------------------------
create or replace function memory.metric_totals()
  returns table (metric text, value bigint)
  language sql stable
  security definer
  set search_path = memory_internal, memory, public, pg_temp
  as $$
    select c.metric, sum(c.value)::bigint from memory_internal.counters c
     group by c.metric order by c.metric
  $$;
comment on function memory.metric_totals() is
  'Totals of every counter (facts_inserted, facts_superseded, facts_retracted, facts_refused, ..., and the model calls'' model_calls:<job kind>:<outcome>, model_tokens_in:<job kind>, model_tokens_out:<job kind>, model_latency_us:<job kind>) across all orgs, for the operator''s /metrics; no per-org detail.';
