-- 0046_rejection_counter_labels: the counters of rejected extraction items
-- are named extraction_rejected:<reason> (a labelled counter, as the model
-- usage ones), so /metrics shows one series with a reason label
-- (chronomem_extraction_rejected_total{reason}) instead of one metric name
-- per reason.  The rows counted so far keep their values under the new name:
-- the owner renames every org's rows here only, with forced row-level
-- security lifted inside this transaction.

alter table memory_internal.counters no force row level security;
update memory_internal.counters
   set metric = 'extraction_rejected:' || substr(metric, length('extraction_rejected_') + 1)
 where metric like 'extraction\_rejected\_%';
alter table memory_internal.counters force row level security;
