/*
 * keel CPU reference plugin — streams, events and the work queue.
 *
 * Inline mode: cpu_stream_submit() runs the item in the calling thread, so
 * every stream is always idle and errors are returned by the call itself.
 *
 * Async mode: each stream has a FIFO of heap-allocated work items and one
 * worker thread, created at the first submission. The worker pops an item,
 * runs it without holding the stream lock, then counts it completed and
 * wakes synchronizers. An event record is the exception: it completes the
 * event and is counted under the stream lock (lock order: stream, then
 * event), so that a stream seen past a completed event is never reported
 * busy because of that record. An item's error is kept on the stream (the first
 * one since the last synchronize wins) and handed to the next
 * stream_synchronize or device synchronize. stream_destroy and finalize
 * set `stopping`; the worker drains the queue, then exits and is joined.
 *
 * Events: record_gen counts records issued, done_gen is the highest record
 * completed, stamped with CLOCK_MONOTONIC when it completes. The event is
 * complete when done_gen >= record_gen. A wait item waits for the
 * generation current when stream_wait_event was called, so re-recording
 * the event later does not delay it. An event is reference counted (the
 * handle plus each queued record/wait) so event_destroy with pending work
 * is safe.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

static atomic_uint_fast64_t cpu_error_seq;

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

static void cpu_event_unref(struct cpu_event *ev)
{
	bool last;

	pthread_mutex_lock(&ev->lock);
	last = --ev->refs == 0;
	pthread_mutex_unlock(&ev->lock);
	if (!last)
		return;
	pthread_cond_destroy(&ev->cond);
	pthread_mutex_destroy(&ev->lock);
	free(ev);
}

static void cpu_event_complete(struct cpu_event *ev, uint64_t gen)
{
	pthread_mutex_lock(&ev->lock);
	if (gen > ev->done_gen) {
		ev->done_gen = gen;
		ev->stamp = cpu_now();
	}
	pthread_cond_broadcast(&ev->cond);
	pthread_mutex_unlock(&ev->lock);
}

static void cpu_event_wait_gen(struct cpu_event *ev, uint64_t gen)
{
	pthread_mutex_lock(&ev->lock);
	while (ev->done_gen < gen)
		pthread_cond_wait(&ev->cond, &ev->lock);
	pthread_mutex_unlock(&ev->lock);
}

/*
 * Resolve an event handle. With any_device the event may belong to any
 * device (stream_wait_event); otherwise it must belong to dev.
 */
static keel_status cpu_event_get(struct cpu_device *dev, keel_event handle,
				 bool any_device, const char *call,
				 const char *what, struct cpu_event **out)
{
	int32_t owner;

	if (!handle)
		return cpu_err(KEEL_STATUS_INVALID_HANDLE, "%s: %s is NULL",
			       call, what);
	if (!cpu_handle_find(handle, CPU_HANDLE_EVENT, &owner))
		return cpu_err(KEEL_STATUS_INVALID_HANDLE,
			       "%s: %s %p is not a live event of the cpu plugin",
			       call, what, (void *)handle);
	if (!any_device && owner != dev->index)
		return cpu_err(KEEL_STATUS_INVALID_HANDLE,
			       "%s: %s %p belongs to cpu:%d, not cpu:%d", call,
			       what, (void *)handle, (int)owner,
			       (int)dev->index);
	*out = (struct cpu_event *)handle;
	return KEEL_STATUS_OK;
}

void cpu_event_release_all(void)
{
	void **list;
	size_t i, n;

	list = cpu_handle_list(CPU_HANDLE_EVENT, &n);
	for (i = 0; i < n; i++) {
		cpu_handle_remove(list[i]);
		cpu_event_unref(list[i]);
	}
	free(list);
}

/* ------------------------------------------------------------------------ */
/* Work items                                                               */
/* ------------------------------------------------------------------------ */

static keel_status cpu_work_run(struct cpu_work *w, char *msg, size_t n)
{
	switch (w->kind) {
	case CPU_WORK_COPY:
		memmove(w->u.copy.dst, w->u.copy.src, w->u.copy.size);
		return KEEL_STATUS_OK;
	case CPU_WORK_MEMSET:
		memset(w->u.set.dst, w->u.set.value, w->u.set.size);
		return KEEL_STATUS_OK;
	case CPU_WORK_HOST_FN:
		w->u.host.fn(w->u.host.data);
		return KEEL_STATUS_OK;
	case CPU_WORK_EVENT_RECORD:
		cpu_event_complete(w->u.event.ev, w->u.event.gen);
		return KEEL_STATUS_OK;
	case CPU_WORK_EVENT_WAIT:
		cpu_event_wait_gen(w->u.event.ev, w->u.event.gen);
		return KEEL_STATUS_OK;
	case CPU_WORK_COLL:
		return cpu_coll_batch_run(w->u.coll, msg, n);
	}
	snprintf(msg, n, "internal: unknown work item kind %d", (int)w->kind);
	return KEEL_STATUS_INTERNAL;
}

/* Drop what an item owns. A record that never ran completes now. */
static void cpu_work_release(const struct cpu_work *w, bool ran)
{
	switch (w->kind) {
	case CPU_WORK_EVENT_RECORD:
		if (!ran)
			cpu_event_complete(w->u.event.ev, w->u.event.gen);
		cpu_event_unref(w->u.event.ev);
		break;
	case CPU_WORK_EVENT_WAIT:
		cpu_event_unref(w->u.event.ev);
		break;
	case CPU_WORK_COLL:
		cpu_coll_batch_free(w->u.coll);
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */

static void cpu_stream_keep_error(struct cpu_stream *s, keel_status st,
				  const char *msg)
{
	if (s->error)
		return;
	s->error = st;
	s->error_seq = atomic_fetch_add(&cpu_error_seq, 1);
	snprintf(s->error_msg, sizeof(s->error_msg), "%s", msg);
}

/*
 * Complete an event record and count it in one step under the stream lock
 * (held by the caller): whoever sees the event complete then also sees the
 * stream past it.
 */
static void cpu_worker_record(struct cpu_stream *s, struct cpu_work *w)
{
	cpu_event_complete(w->u.event.ev, w->u.event.gen);
	cpu_event_unref(w->u.event.ev);
	free(w);
	s->completed++;
	pthread_cond_broadcast(&s->done_cond);
}

static void *cpu_worker_main(void *arg)
{
	struct cpu_stream *s = arg;
	char msg[CPU_MSG_MAX];

	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct cpu_work *w;
		keel_status st;

		while (!s->head && !s->stopping)
			pthread_cond_wait(&s->work_cond, &s->lock);
		w = s->head;
		if (!w)
			break;
		s->head = w->next;
		if (!s->head)
			s->tail = NULL;
		if (w->kind == CPU_WORK_EVENT_RECORD) {
			cpu_worker_record(s, w);
			continue;
		}
		pthread_mutex_unlock(&s->lock);

		msg[0] = '\0';
		st = cpu_work_run(w, msg, sizeof(msg));
		cpu_work_release(w, true);
		free(w);

		pthread_mutex_lock(&s->lock);
		if (st)
			cpu_stream_keep_error(s, st, msg);
		s->completed++;
		pthread_cond_broadcast(&s->done_cond);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static keel_status cpu_submit_inline(const struct cpu_work *w)
{
	char msg[CPU_MSG_MAX] = "";
	struct cpu_work tmp = *w;
	keel_status st;

	st = cpu_work_run(&tmp, msg, sizeof(msg));
	cpu_work_release(&tmp, true);
	if (st)
		return cpu_err_msg(st, msg);
	return KEEL_STATUS_OK;
}

keel_status cpu_stream_submit(struct cpu_stream *s, const struct cpu_work *w,
			      const char *call)
{
	struct cpu_work *item;
	int rc;

	if (!cpu_g.cfg.async)
		return cpu_submit_inline(w);
	item = malloc(sizeof(*item));
	if (!item)
		goto oom;
	*item = *w;
	item->next = NULL;

	pthread_mutex_lock(&s->lock);
	if (!s->worker_started) {
		rc = pthread_create(&s->worker, NULL, cpu_worker_main, s);
		if (rc) {
			pthread_mutex_unlock(&s->lock);
			free(item);
			cpu_work_release(w, false);
			return cpu_err(KEEL_STATUS_DEVICE_ERROR,
				       "%s: cannot start the worker thread of a stream on cpu:%d: %s",
				       call, (int)s->dev->index, strerror(rc));
		}
		s->worker_started = true;
	}
	if (s->tail)
		s->tail->next = item;
	else
		s->head = item;
	s->tail = item;
	s->submitted++;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->lock);
	return KEEL_STATUS_OK;
oom:
	cpu_work_release(w, false);
	return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
		       "%s: out of host memory queueing work on cpu:%d", call,
		       (int)s->dev->index);
}

/* Block until everything submitted so far has completed. */
static void cpu_stream_wait(struct cpu_stream *s)
{
	uint64_t target;

	pthread_mutex_lock(&s->lock);
	target = s->submitted;
	while (s->completed < target)
		pthread_cond_wait(&s->done_cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

/* Take the stream's pending error (OK when none); msg gets its text. */
static keel_status cpu_stream_take_error(struct cpu_stream *s, uint64_t *seq,
					 char *msg, size_t n)
{
	keel_status st;

	pthread_mutex_lock(&s->lock);
	st = s->error;
	if (st) {
		*seq = s->error_seq;
		snprintf(msg, n, "%s", s->error_msg);
		s->error = KEEL_STATUS_OK;
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

/* Drain the queue and join the worker. */
static void cpu_stream_stop(struct cpu_stream *s)
{
	bool started;

	pthread_mutex_lock(&s->lock);
	started = s->worker_started;
	s->stopping = true;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->lock);
	if (started)
		pthread_join(s->worker, NULL);
	s->worker_started = false;
}

static void cpu_stream_free(struct cpu_stream *s)
{
	if (s->error)
		cpu_log(KEEL_LOG_WARN,
			"cpu plugin: a stream of cpu:%d was released with an unreported error: %s",
			(int)s->dev->index, s->error_msg);
	pthread_cond_destroy(&s->done_cond);
	pthread_cond_destroy(&s->work_cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static struct cpu_stream *cpu_stream_alloc(struct cpu_device *dev,
					   int32_t priority, bool is_default)
{
	struct cpu_stream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->dev = dev;
	s->priority = priority;
	s->is_default = is_default;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work_cond, NULL);
	pthread_cond_init(&s->done_cond, NULL);
	return s;
}

static int cpu_dev_add_stream(struct cpu_device *dev, struct cpu_stream *s)
{
	int ret = 0;

	pthread_mutex_lock(&dev->stream_lock);
	if (dev->nstreams == dev->stream_cap) {
		size_t cap = dev->stream_cap ? dev->stream_cap * 2 : 8;
		struct cpu_stream **v;

		v = realloc(dev->streams, cap * sizeof(*v));
		if (!v) {
			ret = -1;
			goto out;
		}
		dev->streams = v;
		dev->stream_cap = cap;
	}
	dev->streams[dev->nstreams++] = s;
out:
	pthread_mutex_unlock(&dev->stream_lock);
	return ret;
}

static void cpu_dev_remove_stream(struct cpu_device *dev, struct cpu_stream *s)
{
	size_t i;

	pthread_mutex_lock(&dev->stream_lock);
	for (i = 0; i < dev->nstreams; i++) {
		if (dev->streams[i] != s)
			continue;
		memmove(&dev->streams[i], &dev->streams[i + 1],
			(dev->nstreams - i - 1) * sizeof(dev->streams[0]));
		dev->nstreams--;
		break;
	}
	pthread_mutex_unlock(&dev->stream_lock);
}

keel_status cpu_stream_device_init(struct cpu_device *dev)
{
	pthread_mutex_init(&dev->stream_lock, NULL);
	dev->streams = NULL;
	dev->nstreams = 0;
	dev->stream_cap = 0;
	dev->default_stream = cpu_stream_alloc(dev, 0, true);
	if (!dev->default_stream)
		return KEEL_STATUS_OUT_OF_MEMORY;
	if (cpu_dev_add_stream(dev, dev->default_stream)) {
		cpu_stream_free(dev->default_stream);
		dev->default_stream = NULL;
		return KEEL_STATUS_OUT_OF_MEMORY;
	}
	return KEEL_STATUS_OK;
}

void cpu_stream_device_release(struct cpu_device *dev)
{
	size_t i;

	for (i = 0; i < dev->nstreams; i++)
		cpu_stream_stop(dev->streams[i]);
	for (i = 0; i < dev->nstreams; i++) {
		if (!dev->streams[i]->is_default)
			cpu_handle_remove(dev->streams[i]);
		cpu_stream_free(dev->streams[i]);
	}
	free(dev->streams);
	dev->streams = NULL;
	dev->nstreams = 0;
	dev->stream_cap = 0;
	dev->default_stream = NULL;
	pthread_mutex_destroy(&dev->stream_lock);
}

void cpu_device_wait_idle(struct cpu_device *dev)
{
	size_t i;

	if (!cpu_g.cfg.async)
		return;
	pthread_mutex_lock(&dev->stream_lock);
	for (i = 0; i < dev->nstreams; i++)
		cpu_stream_wait(dev->streams[i]);
	pthread_mutex_unlock(&dev->stream_lock);
}

keel_status cpu_device_sync(struct cpu_device *dev)
{
	char msg[CPU_MSG_MAX], best_msg[CPU_MSG_MAX] = "";
	keel_status best = KEEL_STATUS_OK;
	uint64_t best_seq = UINT64_MAX;
	size_t i;

	if (!cpu_g.cfg.async)
		return KEEL_STATUS_OK;
	pthread_mutex_lock(&dev->stream_lock);
	for (i = 0; i < dev->nstreams; i++) {
		uint64_t seq = 0;
		keel_status st;

		cpu_stream_wait(dev->streams[i]);
		st = cpu_stream_take_error(dev->streams[i], &seq, msg,
					   sizeof(msg));
		if (st && seq < best_seq) {
			best = st;
			best_seq = seq;
			snprintf(best_msg, sizeof(best_msg), "%s", msg);
		}
	}
	pthread_mutex_unlock(&dev->stream_lock);
	if (best)
		return cpu_err_msg(best, best_msg);
	return KEEL_STATUS_OK;
}

keel_status cpu_stream_get(struct cpu_device *dev, keel_stream handle,
			   const char *call, struct cpu_stream **out)
{
	int32_t owner;

	if (!handle) {
		*out = dev->default_stream;
		return KEEL_STATUS_OK;
	}
	if (!cpu_handle_find(handle, CPU_HANDLE_STREAM, &owner))
		return cpu_err(KEEL_STATUS_INVALID_HANDLE,
			       "%s: %p is not a live stream of the cpu plugin",
			       call, (void *)handle);
	if (owner != dev->index)
		return cpu_err(KEEL_STATUS_INVALID_HANDLE,
			       "%s: stream %p belongs to cpu:%d, not cpu:%d",
			       call, (void *)handle, (int)owner,
			       (int)dev->index);
	*out = (struct cpu_stream *)handle;
	return KEEL_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Stream group                                                             */
/* ------------------------------------------------------------------------ */

static keel_status cpu_stream_create(int32_t device, int32_t priority,
				     keel_stream *stream)
{
	struct cpu_device *dev;
	struct cpu_stream *s;
	keel_status st;

	st = cpu_dev_get(device, "stream_create", &dev);
	if (st)
		return st;
	if (!stream)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "stream_create: stream is NULL");
	/* One priority level: every value clamps to 0. */
	s = cpu_stream_alloc(dev, 0, false);
	if (!s)
		goto oom;
	if (cpu_dev_add_stream(dev, s))
		goto oom_free;
	if (cpu_handle_add(s, CPU_HANDLE_STREAM, dev->index))
		goto oom_remove;
	*stream = (keel_stream)s;
	return KEEL_STATUS_OK;
oom_remove:
	cpu_dev_remove_stream(dev, s);
oom_free:
	cpu_stream_free(s);
oom:
	return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
		       "stream_create: out of host memory on cpu:%d (priority %d)",
		       (int)device, (int)priority);
}

static keel_status cpu_stream_destroy(int32_t device, keel_stream stream)
{
	struct cpu_device *dev;
	struct cpu_stream *s;
	keel_status st;

	st = cpu_dev_get(device, "stream_destroy", &dev);
	if (st)
		return st;
	if (!stream)
		return cpu_err(KEEL_STATUS_INVALID_HANDLE,
			       "stream_destroy: the default stream (NULL) of cpu:%d cannot be destroyed",
			       (int)device);
	st = cpu_stream_get(dev, stream, "stream_destroy", &s);
	if (st)
		return st;
	cpu_handle_remove(s);
	cpu_dev_remove_stream(dev, s);
	cpu_stream_stop(s);
	cpu_stream_free(s);
	return KEEL_STATUS_OK;
}

static keel_status cpu_stream_synchronize(int32_t device, keel_stream stream)
{
	char msg[CPU_MSG_MAX];
	struct cpu_device *dev;
	struct cpu_stream *s;
	uint64_t seq;
	keel_status st;

	st = cpu_dev_get(device, "stream_synchronize", &dev);
	if (st)
		return st;
	st = cpu_stream_get(dev, stream, "stream_synchronize", &s);
	if (st || !cpu_g.cfg.async)
		return st;
	cpu_stream_wait(s);
	st = cpu_stream_take_error(s, &seq, msg, sizeof(msg));
	if (st)
		return cpu_err_msg(st, msg);
	return KEEL_STATUS_OK;
}

static keel_status cpu_stream_query(int32_t device, keel_stream stream)
{
	struct cpu_device *dev;
	struct cpu_stream *s;
	keel_status st;
	bool idle;

	st = cpu_dev_get(device, "stream_query", &dev);
	if (st)
		return st;
	st = cpu_stream_get(dev, stream, "stream_query", &s);
	if (st)
		return st;
	pthread_mutex_lock(&s->lock);
	idle = s->completed == s->submitted;
	pthread_mutex_unlock(&s->lock);
	return idle ? KEEL_STATUS_OK : KEEL_STATUS_NOT_READY;
}

static keel_status cpu_stream_wait_event(int32_t device, keel_stream stream,
					 keel_event event)
{
	struct cpu_work w = { .kind = CPU_WORK_EVENT_WAIT };
	struct cpu_device *dev;
	struct cpu_event *ev;
	struct cpu_stream *s;
	keel_status st;
	uint64_t gen;
	bool done;

	st = cpu_dev_get(device, "stream_wait_event", &dev);
	if (st)
		return st;
	st = cpu_stream_get(dev, stream, "stream_wait_event", &s);
	if (st)
		return st;
	st = cpu_event_get(dev, event, true, "stream_wait_event", "event",
			   &ev);
	if (st)
		return st;
	pthread_mutex_lock(&ev->lock);
	gen = ev->record_gen;
	done = ev->done_gen >= gen;
	if (!done)
		ev->refs++;
	pthread_mutex_unlock(&ev->lock);
	if (done)
		return KEEL_STATUS_OK;
	w.u.event.ev = ev;
	w.u.event.gen = gen;
	return cpu_stream_submit(s, &w, "stream_wait_event");
}

static keel_status cpu_launch_host_func(int32_t device, keel_stream stream,
					keel_host_fn fn, void *user_data)
{
	struct cpu_work w = { .kind = CPU_WORK_HOST_FN };
	struct cpu_device *dev;
	struct cpu_stream *s;
	keel_status st;

	st = cpu_dev_get(device, "launch_host_func", &dev);
	if (st)
		return st;
	st = cpu_stream_get(dev, stream, "launch_host_func", &s);
	if (st)
		return st;
	if (!fn)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "launch_host_func: fn is NULL");
	w.u.host.fn = fn;
	w.u.host.data = user_data;
	return cpu_stream_submit(s, &w, "launch_host_func");
}

static keel_status cpu_event_create(int32_t device, keel_event *event)
{
	struct cpu_device *dev;
	struct cpu_event *ev;
	keel_status st;

	st = cpu_dev_get(device, "event_create", &dev);
	if (st)
		return st;
	if (!event)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "event_create: event is NULL");
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		goto oom;
	ev->device = device;
	ev->refs = 1;
	pthread_mutex_init(&ev->lock, NULL);
	pthread_cond_init(&ev->cond, NULL);
	if (cpu_handle_add(ev, CPU_HANDLE_EVENT, device)) {
		cpu_event_unref(ev);
		goto oom;
	}
	*event = (keel_event)ev;
	return KEEL_STATUS_OK;
oom:
	return cpu_err(KEEL_STATUS_OUT_OF_MEMORY,
		       "event_create: out of host memory on cpu:%d",
		       (int)device);
}

static keel_status cpu_event_destroy(int32_t device, keel_event event)
{
	struct cpu_device *dev;
	struct cpu_event *ev;
	keel_status st;

	st = cpu_dev_get(device, "event_destroy", &dev);
	if (st)
		return st;
	st = cpu_event_get(dev, event, false, "event_destroy", "event", &ev);
	if (st)
		return st;
	cpu_handle_remove(ev);
	cpu_event_unref(ev);
	return KEEL_STATUS_OK;
}

static keel_status cpu_event_record(int32_t device, keel_event event,
				    keel_stream stream)
{
	struct cpu_work w = { .kind = CPU_WORK_EVENT_RECORD };
	struct cpu_device *dev;
	struct cpu_event *ev;
	struct cpu_stream *s;
	keel_status st;

	st = cpu_dev_get(device, "event_record", &dev);
	if (st)
		return st;
	st = cpu_event_get(dev, event, false, "event_record", "event", &ev);
	if (st)
		return st;
	st = cpu_stream_get(dev, stream, "event_record", &s);
	if (st)
		return st;
	pthread_mutex_lock(&ev->lock);
	w.u.event.gen = ++ev->record_gen;
	ev->refs++;
	pthread_mutex_unlock(&ev->lock);
	w.u.event.ev = ev;
	return cpu_stream_submit(s, &w, "event_record");
}

static keel_status cpu_event_query(int32_t device, keel_event event)
{
	struct cpu_device *dev;
	struct cpu_event *ev;
	keel_status st;
	bool done;

	st = cpu_dev_get(device, "event_query", &dev);
	if (st)
		return st;
	st = cpu_event_get(dev, event, false, "event_query", "event", &ev);
	if (st)
		return st;
	pthread_mutex_lock(&ev->lock);
	done = ev->done_gen >= ev->record_gen;
	pthread_mutex_unlock(&ev->lock);
	return done ? KEEL_STATUS_OK : KEEL_STATUS_NOT_READY;
}

static keel_status cpu_event_synchronize(int32_t device, keel_event event)
{
	struct cpu_device *dev;
	struct cpu_event *ev;
	keel_status st;
	uint64_t gen;

	st = cpu_dev_get(device, "event_synchronize", &dev);
	if (st)
		return st;
	st = cpu_event_get(dev, event, false, "event_synchronize", "event",
			   &ev);
	if (st)
		return st;
	pthread_mutex_lock(&ev->lock);
	gen = ev->record_gen;
	pthread_mutex_unlock(&ev->lock);
	cpu_event_wait_gen(ev, gen);
	return KEEL_STATUS_OK;
}

/* Snapshot of an event for elapsed time. */
static keel_status cpu_event_stamp(struct cpu_event *ev, const char *what,
				   struct timespec *stamp)
{
	uint64_t rec, done;

	pthread_mutex_lock(&ev->lock);
	rec = ev->record_gen;
	done = ev->done_gen;
	*stamp = ev->stamp;
	pthread_mutex_unlock(&ev->lock);
	if (rec == 0)
		return cpu_err(KEEL_STATUS_INVALID_STATE,
			       "event_elapsed_ms: the %s event %p was never recorded",
			       what, (void *)ev);
	if (done < rec)
		return cpu_err(KEEL_STATUS_NOT_READY,
			       "event_elapsed_ms: the last record of the %s event %p has not completed",
			       what, (void *)ev);
	return KEEL_STATUS_OK;
}

static keel_status cpu_event_elapsed_ms(int32_t device, keel_event start,
					keel_event end, float *ms)
{
	struct timespec t0, t1;
	struct cpu_event *e0, *e1;
	struct cpu_device *dev;
	keel_status st;

	st = cpu_dev_get(device, "event_elapsed_ms", &dev);
	if (st)
		return st;
	if (!ms)
		return cpu_err(KEEL_STATUS_INVALID_ARGUMENT,
			       "event_elapsed_ms: ms is NULL");
	st = cpu_event_get(dev, start, false, "event_elapsed_ms", "start",
			   &e0);
	if (st)
		return st;
	st = cpu_event_get(dev, end, false, "event_elapsed_ms", "end", &e1);
	if (st)
		return st;
	st = cpu_event_stamp(e0, "start", &t0);
	if (st)
		return st;
	st = cpu_event_stamp(e1, "end", &t1);
	if (st)
		return st;
	*ms = (float)cpu_ts_ms(t0, t1);
	return KEEL_STATUS_OK;
}

const keel_stream_ops cpu_stream_ops = {
	.header = KEEL_TABLE_HEADER(keel_stream_ops),
	.stream_create = cpu_stream_create,
	.stream_destroy = cpu_stream_destroy,
	.stream_synchronize = cpu_stream_synchronize,
	.stream_query = cpu_stream_query,
	.stream_wait_event = cpu_stream_wait_event,
	.launch_host_func = cpu_launch_host_func,
	.event_create = cpu_event_create,
	.event_destroy = cpu_event_destroy,
	.event_record = cpu_event_record,
	.event_query = cpu_event_query,
	.event_synchronize = cpu_event_synchronize,
	.event_elapsed_ms = cpu_event_elapsed_ms,
};
