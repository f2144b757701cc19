/*
 * graph.cu — capture and replay of a rank's iteration as a CUDA graph
 * (DESIGN §4 "Record and replay"), and the graphs' DOT dumps for `hanayo profile`.
 *
 * Each rank captures on its own stream in thread-local mode, so all ranks
 * capture at once without one thread's capture forbidding another's calls.
 * capture_end instantiates the graph and uploads it to the device; a
 * caller running several ranks launches no graph before every rank's
 * capture_end has returned (lib/runtime.c: the instantiation of one may
 * wait for the device while another's graph would sit at a flag).
 * The graph keeps the wait sites recorded during its capture, which the
 * watchdog reads while the graph runs (signal.cu).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.cuh"

int hy_cuda_capture_begin(hy_stream *s, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    if (cs->capturing)
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: capture_begin while already capturing", s->rank);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    /* Marked first: the monitor must not query a stream under capture. */
    pthread_mutex_lock(&cs->lock);
    cs->capturing = 1;
    cs->capture.n = 0;
    pthread_mutex_unlock(&cs->lock);
    cudaError_t e = cudaStreamBeginCapture(cs->s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        pthread_mutex_lock(&cs->lock);
        cs->capturing = 0;
        pthread_mutex_unlock(&cs->lock);
        return HY_CUDA_FAIL(err, e, "cudaStreamBeginCapture");
    }
    return HY_OK;
}

/* err may be NULL: the capture is being abandoned after a failure. */
int hy_cuda_capture_end(hy_stream *s, hy_graph **out, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    hy_error ignored;
    if (!err) err = &ignored;
    *out = NULL;
    if (!cs->capturing)
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: capture_end without capture_begin", s->rank);
    int rc = enter_stream(cs, err);
    cudaGraph_t graph = NULL;
    cudaError_t ended = rc ? cudaSuccess : cudaStreamEndCapture(cs->s, &graph);
    pthread_mutex_lock(&cs->lock);
    cs->capturing = 0;
    pthread_mutex_unlock(&cs->lock);
    if (rc) return rc;
    if (ended != cudaSuccess) return HY_CUDA_FAIL(err, ended, "cudaStreamEndCapture");
    hy_graph *g = (hy_graph *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphDestroy(graph);
        return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of memory finishing a graph");
    }
    g->graph = graph;
    g->drv = &cb_of(s->be)->drv;
    cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (e != cudaSuccess) {
        cudaGraphDestroy(graph);
        free(g);
        return HY_CUDA_FAIL(err, e, "cudaGraphInstantiate");
    }
    /* Uploaded now and waited for, so the first launch has nothing left to
     * set up on the device (the runtime launches only once every rank is
     * here). The stream holds no flag wait outside a graph, so this ends. */
    e = cudaGraphUpload(g->exec, cs->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs->s);
    if (e != cudaSuccess) {
        cudaGraphExecDestroy(g->exec);
        cudaGraphDestroy(graph);
        free(g);
        rc = HY_CUDA_FAIL(err, e, "cudaGraphUpload");
        hy_error_prefix(err, "rank %d: ", s->rank);
        return rc;
    }
    pthread_mutex_lock(&cs->lock);
    g->sites = cs->capture;   /* the graph takes the recorded waits */
    memset(&cs->capture, 0, sizeof cs->capture);
    pthread_mutex_unlock(&cs->lock);
    *out = g;
    return HY_OK;
}

int hy_cuda_graph_launch(hy_graph *g, hy_stream *s, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    /* The stream is idle (each iteration ends with sync), so the progress
     * word can be reset from the host; sync clears `active` again, so a
     * destroyed graph's sites are never read. */
    pthread_mutex_lock(&cs->lock);
    cs->active = &g->sites;
    *cs->progress = 0;
    cs->seen = 0;
    hy_watchdog_start(&cs->since, s->be->watchdog_s);
    pthread_mutex_unlock(&cs->lock);
    HY_CUDA_CHECK(cudaGraphLaunch(g->exec, cs->s), err);
    return HY_OK;
}

void hy_cuda_graph_destroy(hy_graph *g) {
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g->sites.v);
    free(g);
}

int hy_cuda_graph_dot(hy_graph *g, const char *path, hy_graph_nodes *nodes, hy_error *err) {
    memset(nodes, 0, sizeof *nodes);
    size_t n = 0;
    HY_CUDA_CHECK(cudaGraphGetNodes(g->graph, NULL, &n), err);
    cudaGraphNode_t *all = (cudaGraphNode_t *)calloc(n ? n : 1, sizeof *all);
    if (!all) return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of memory listing graph nodes");
    cudaError_t e = cudaGraphGetNodes(g->graph, all, &n);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n && e == cudaSuccess; i++) {
        CUgraphNodeType type;
        r = g->drv->node_type((CUgraphNode)all[i], &type);
        if (r != CUDA_SUCCESS) break;
        nodes->nodes++;
        if (type == CU_GRAPH_NODE_TYPE_KERNEL) nodes->kernels++;
        else if (type == CU_GRAPH_NODE_TYPE_MEMCPY) nodes->memcpys++;
        else if (type == CU_GRAPH_NODE_TYPE_MEMSET) nodes->memsets++;
        /* What a captured stream wait or write becomes. */
        else if (type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP) nodes->memops++;
        else nodes->others++;
    }
    free(all);
    if (e != cudaSuccess) return HY_CUDA_FAIL(err, e, "cudaGraphGetNodes");
    if (r != CUDA_SUCCESS) return hy_cuda_driver_fail(g->drv, err, r, "cuGraphNodeGetType", -1);
    e = cudaGraphDebugDotPrint(g->graph, path, cudaGraphDebugDotFlagsVerbose);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return hy_fail(err, HY_ERR_RUNTIME, "%s: cudaGraphDebugDotPrint failed: %s", path,
                       cudaGetErrorString(e));
    }
    return HY_OK;
}
