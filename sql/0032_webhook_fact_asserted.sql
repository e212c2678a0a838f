-- 0032_webhook_fact_asserted: a webhook event for a new fact, and the event
-- types defined once.  Until now an endpoint heard of a fact only when its
-- window changed (superseded, retracted, ...): the first time the memory
-- learned a user's plan or email, nothing was pushed.  fact.asserted joins
-- the types an endpoint may list; an endpoint subscribed to {*} receives it
-- from now on, as that subscription promises for types added later.
--
-- The types were written twice: in memory.webhook_event_types() (with what
-- each means; functions/087) and in the endpoints' check constraint (0024).
-- The function moves here, beside the constraint, which now reads its list
-- through memory_internal.webhook_type_list(): both immutable, so the check
-- folds to a constant when planned.  A new type is a migration that
-- replaces the function (removing one would need its subscriptions gone
-- first: a constraint is not re-checked when a function changes).
create or replace function memory.webhook_event_types()
  returns table (event_type text, description text)
  language sql immutable parallel safe
  as $$
    select * from (values
      ('fact.asserted', 'A new fact was stored (not an exact retry of a stored one): its id, triple, content and window.'),
      ('fact.superseded', 'A newer fact closed a fact''s window (same identity): old and new fact ids, the old fact''s triple.'),
      ('fact.retracted', 'A fact was retracted (it never held; its claim is tombstoned).'),
      ('fact.contradicted', 'A fact''s window was closed by a contradiction (e.g. one the extraction model reported).'),
      ('fact.expired', 'A fact''s window was closed without a newer fact (memory.close_fact, or a split moving the fact to another entity).'),
      ('fact.restored', 'A fact''s window was given back: what had closed it was retracted or wiped, or a split laid its name out again.'),
      ('episode.enriched', 'The extraction model''s answer for an episode was applied.'),
      ('memory.wiped', 'A project''s memory (or a session''s, or a subject''s) was wiped; counts only.')
    ) t(event_type, description)
  $$;
comment on function memory.webhook_event_types() is
  'The event types a webhook endpoint can subscribe to, with what each means. An endpoint subscribed to {*} receives every type, including types added later.';

create or replace function memory_internal.webhook_type_list() returns text[]
  language sql immutable parallel safe
  as $$ select array_agg(t.event_type order by t.event_type) from memory.webhook_event_types() t $$;
comment on function memory_internal.webhook_type_list() is
  'The event types of memory.webhook_event_types() as an array: what memory.webhook_endpoints'' check constraint accepts (besides {*}).';

alter table memory.webhook_endpoints drop constraint webhook_endpoints_event_types_check;
alter table memory.webhook_endpoints add constraint webhook_endpoints_event_types_check check (
  event_types = '{*}'
  or (cardinality(event_types) >= 1 and event_types <@ memory_internal.webhook_type_list()));
