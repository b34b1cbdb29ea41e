/*
 * finish.h — why a choice ended: the reasons the engine reports in its events (engine.h) and
 * that the scheduler and the sample phase decide for a sequence (seq.finish). It holds the
 * values alone, so that engine/'s lower files share them without depending on engine.c.
 */
#ifndef KVSERVE_FINISH_H
#define KVSERVE_FINISH_H

enum engine_finish {
    ENGINE_FINISH_NONE = 0, /* more events follow for this choice */
    ENGINE_FINISH_STOP,     /* end-of-generation token, stop token or stop string; a grammar
                               whose sentence is complete */
    ENGINE_FINISH_LENGTH,   /* max_tokens or the context limit */
    ENGINE_FINISH_ABORT,    /* cancelled */
    ENGINE_FINISH_ERROR,    /* backend failure */
};

#endif
